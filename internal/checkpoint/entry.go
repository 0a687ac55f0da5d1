package checkpoint

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
)

// Entry is a PodDevicesEntry that keeps its JSON text once it has been
// encoded, and what hashing it last added to the checksum. An entry never
// changes once made, so a writer that keeps its entries between writes (as
// the device manager does) encodes each of them once, however many files it
// appears in, and hashes it again only after the entries before it changed.
//
// The embedded PodDevicesEntry, its DeviceIDs lists and its AllocResp must not
// be modified after NewEntry. An Entry is safe for concurrent use.
//
// It is part of the device manager's write path (see the package documentation).
type Entry struct {
	PodDevicesEntry
	text atomic.Pointer[cachedText]
	sum  cachedSum
	// run is, for an entry that heads a run (see entryRun), the run's textSum as last
	// composed.
	run atomic.Pointer[entryRun]
	// heads says whether the entry starts a run (see runHead).
	heads bool
	// read is the entry's text in the file it was read from (see decodeEntries), set before
	// the Entry is handed out: the first encoding uses it if it is exactly Encode's.
	read []byte
}

// NewEntry returns e as an Entry. It does not copy e's lists or bytes: they
// are shared, and must not be modified afterwards.
func NewEntry(e PodDevicesEntry) *Entry {
	return &Entry{PodDevicesEntry: e, heads: runHead(&e)}
}

// Registered is one resource's registered device IDs (a RegisteredDevices
// pair) that keeps its encoding between writes, as Entry does. Resource and
// IDs must not be modified after NewRegistered. It is safe for concurrent use.
//
// It is part of the device manager's write path (see the package documentation).
type Registered struct {
	Resource string
	// IDs is written as null when nil.
	IDs  []string
	text atomic.Pointer[cachedText]
	sum  cachedSum
}

// NewRegistered returns the pair resource: ids. ids is shared, not copied.
func NewRegistered(resource string, ids []string) *Registered {
	return &Registered{Resource: resource, IDs: ids}
}

// cachedText is a piece of JSON, or the string in it that is not valid UTF-8.
type cachedText struct {
	json    []byte
	badUTF8 string
	bad     bool
}

// encoded returns the entry's JSON object, computing it on first use.
func (e *Entry) encoded() *cachedText {
	if t := e.text.Load(); t != nil {
		return t
	}
	var w jsonWriter
	if e.read != nil {
		if w.canonicalEntry(&e.PodDevicesEntry, e.read) {
			t := &cachedText{json: e.read}
			e.text.Store(t)
			return t
		}
	}
	b := w.entry(make([]byte, 0, entrySizeHint(&e.PodDevicesEntry)), &e.PodDevicesEntry)
	t := &cachedText{json: b, badUTF8: w.badString, bad: w.badUTF8}
	e.text.Store(t)
	return t
}

// encoded returns the pair's JSON text ("resource":[ids]), computing it on first use.
func (r *Registered) encoded() *cachedText {
	if t := r.text.Load(); t != nil {
		return t
	}
	var w jsonWriter
	b := w.str(make([]byte, 0, regSizeHint(map[string][]string{r.Resource: r.IDs})), r.Resource)
	b = append(b, ':')
	b = w.strList(b, r.IDs)
	t := &cachedText{json: b, badUTF8: w.badString, bad: w.badUTF8}
	r.text.Store(t)
	return t
}

// Prepared is the content of a checkpoint made of Entries and Registered
// pairs: the same file as the Data that Data returns, but each piece's JSON
// text is computed once and reused by every later write. A nil Entries or
// Registered is written as null, as for Data. Registered may be in any order
// but must not name a resource twice. Neither the slices nor what they point
// to may be modified while Prepared is being encoded.
//
// It is part of the device manager's write path (see the package documentation).
type Prepared struct {
	Entries    []*Entry
	Registered []*Registered
}

// Data returns p as Data, sharing p's lists and bytes.
func (p *Prepared) Data() *Data {
	d := &Data{}
	if p.Entries != nil {
		d.PodDeviceEntries = make([]PodDevicesEntry, len(p.Entries))
		for i, e := range p.Entries {
			d.PodDeviceEntries[i] = e.PodDevicesEntry
		}
	}
	if p.Registered != nil {
		d.RegisteredDevices = make(map[string][]string, len(p.Registered))
		for _, r := range p.Registered {
			d.RegisteredDevices[r.Resource] = r.IDs
		}
	}
	return d
}

// EncodePrepared returns the checkpoint file for p: byte for byte
// Encode(p.Data()), with the pieces' JSON taken from their cache. It fails,
// as Encode does, only with ErrInvalidUTF8. A nil p encodes as the zero Data.
//
// It is part of the device manager's write path (see the package documentation).
func EncodePrepared(p *Prepared) ([]byte, error) {
	if p == nil {
		return Encode(nil)
	}
	return appendPrepared(nil, p)
}

// appendPrepared appends the checkpoint file for p (not nil) to dst.
func appendPrepared(dst []byte, p *Prepared) ([]byte, error) {
	reg, size, err := planPrepared(p)
	if err != nil {
		return nil, err
	}
	// The buffer is grown by whichever goroutine emits the pieces (see emitPrepared).
	buf, grown := dst, false
	sum := emitPrepared(p, reg, func(b []byte) {
		if !grown {
			buf, grown = slices.Grow(buf, size), true
		}
		buf = append(buf, b...)
	})
	return appendChecksumTail(buf, sum), nil
}

// planPrepared checks that every piece of p encodes (the only failure is ErrInvalidUTF8, found
// before anything is written) and returns p's registered pairs sorted by resource and the
// file's approximate size.
func planPrepared(p *Prepared) (reg []*Registered, size int, err error) {
	reg = p.Registered
	if len(reg) > 1 && !slices.IsSortedFunc(reg, compareRegistered) {
		reg = slices.SortedFunc(slices.Values(reg), compareRegistered)
	}
	size = 96
	for _, e := range p.Entries {
		t := e.encoded()
		if t.bad {
			return nil, 0, fmt.Errorf("%w: %q", ErrInvalidUTF8, t.badUTF8)
		}
		size += len(t.json) + 1
	}
	for _, r := range reg {
		t := r.encoded()
		if t.bad {
			return nil, 0, fmt.Errorf("%w: %q", ErrInvalidUTF8, t.badUTF8)
		}
		size += len(t.json) + 1
	}
	return reg, size, nil
}

// emitPrepared passes the file for p up to and including the Data object to emit, piece by
// piece, and returns the checksum. Once the checksum has had to hash inlineHashBudget bytes
// of pieces afresh (the pieces before them changed), the pieces are emitted on a second
// goroutine while the hashing goes on, so that a writer's syscalls overlap it: a file of many
// entries, or one large registered list after an entry changed; a checksum the memos answer
// is not worth a goroutine.
// emitPrepared joins it before returning, and emit is never called concurrently with itself.
func emitPrepared(p *Prepared, reg []*Registered, emit func([]byte)) uint32 {
	emitAll := func() { emitPreparedJSON(emit, p.Entries, p.Registered == nil, reg) }
	var done chan struct{}
	sum := checksumPrepared(p.Entries, p.Registered == nil, reg, func() {
		done = make(chan struct{})
		go func() {
			defer close(done)
			emitAll()
		}()
	})
	if done == nil {
		emitAll()
	} else {
		<-done
	}
	return sum
}

// inlineHashBudget is how many bytes of pieces (measured by their JSON) checksumPrepared hashes
// afresh before it calls its slow callback.
const inlineHashBudget = 64 << 10

// appendChecksumTail appends the end of the file: the checksum and the closing brace.
func appendChecksumTail(buf []byte, sum uint32) []byte {
	buf = append(buf, `,"Checksum":`...)
	buf = strconv.AppendUint(buf, uint64(sum), 10)
	return append(buf, '}')
}

func compareRegistered(a, b *Registered) int { return cmp.Compare(a.Resource, b.Resource) }

// The constant pieces of a Prepared file.
var (
	jsonFileHead   = []byte(`{"Data":{"PodDeviceEntries":`)
	jsonRegistered = []byte(`,"RegisteredDevices":`)
	jsonNull       = []byte("null")
	jsonPunct      = []byte("[]{},")
)

// emitJoined emits null when isNil, else the pieces' JSON separated by commas between open
// and close (each one byte of jsonPunct).
func emitJoined[T any](emit func([]byte), items []T, isNil bool, open, close []byte, piece func(T) []byte) {
	if isNil {
		emit(jsonNull)
		return
	}
	emit(open)
	comma := jsonPunct[4:5]
	for i, it := range items {
		if i > 0 {
			emit(comma)
		}
		emit(piece(it))
	}
	emit(close)
}

// emitPreparedJSON emits the file up to and including the Data object from the cached
// pieces; reg is sorted by resource, regNil says whether it stands for a nil map.
func emitPreparedJSON(emit func([]byte), entries []*Entry, regNil bool, reg []*Registered) {
	emit(jsonFileHead)
	emitJoined(emit, entries, entries == nil, jsonPunct[0:1], jsonPunct[1:2], func(e *Entry) []byte { return e.encoded().json })
	emit(jsonRegistered)
	emitJoined(emit, reg, regNil, jsonPunct[2:3], jsonPunct[3:4], func(r *Registered) []byte { return r.encoded().json })
	emit(jsonPunct[3:4])
}

// checksumPrepared is the checksum of the Prepared whose pieces are given (reg sorted by
// resource, regNil for a nil map), with each piece's text hashed again only when what comes
// before it changed since its last checksum. slow, if not nil, is called once, as soon as the
// pieces hashed afresh add up to inlineHashBudget bytes of JSON.
func checksumPrepared(entries []*Entry, regNil bool, reg []*Registered, slow func()) uint32 {
	fresh := 0
	hashing := func(t *cachedText) {
		if slow == nil {
			return
		}
		if fresh += len(t.json); fresh >= inlineHashBudget {
			slow()
			slow = nil
		}
	}
	s := newHasher(false)
	var allowance passAllowance
	// One entry's part of the checksum; it reports whether the entry has its whole textSum.
	entry := func(e *Entry) bool {
		textLen := func() int { return entryTextLen(s.t, &e.PodDevicesEntry) }
		switch e.sum.apply(&s, textLen) {
		case sumMemo:
			return e.sum.whole.Load() != nil
		case sumWhole:
			allowance.spared(len(e.encoded().json))
			return true
		}
		hashing(e.encoded())
		if fastPath(offWhole) && allowance.affords(len(e.encoded().json), e.sum.hashedBefore()) {
			w := entrySum(&e.PodDevicesEntry)
			e.sum.whole.Store(w)
			s.h = w.apply(s.h)
			return true
		}
		h0 := s.h
		s.entry(&e.PodDevicesEntry)
		e.sum.remember(h0, s.h, textLen, false)
		return false
	}
	s.frag(s.t.head)
	if entries == nil {
		s.frag(s.t.nilText)
	} else {
		s.char('[')
		for i := 0; i < len(entries); {
			if i > 0 {
				s.char(' ')
			}
			i = checksumRun(&s, entries, i, entry)
		}
		s.char(']')
	}
	s.frag(s.t.reg)
	if regNil {
		s.frag(s.t.nilText)
	} else {
		s.frag(s.t.mapOpen)
		for i, r := range reg {
			if i > 0 {
				s.char(' ')
			}
			textLen := func() int { return len(r.Resource) + 1 + strListTextLen(s.t, r.IDs) }
			if !r.sum.applied(&s, textLen) {
				hashing(r.encoded())
				if wide := len(r.encoded().json) >= wideSumBytes; wide && fastPath(offWhole) && r.sum.hashedBefore() {
					add := r.sum.fillGroup(uint8(s.h), textLen, func(h *lanes8) {
						h.write(r.Resource)
						h.write(":")
						h.writeList(r.IDs)
					})
					s.h = r.sum.mul.Load()*s.h + add
					continue
				}
				h0 := s.h
				s.str(r.Resource)
				s.char(':')
				s.strList(r.IDs)
				r.sum.remember(h0, s.h, textLen, len(r.encoded().json) >= wideSumBytes)
			}
		}
		s.char(']')
	}
	s.char('}')
	return s.h
}

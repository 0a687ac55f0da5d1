package checkpoint

import (
	"cmp"
	"fmt"
	"slices"
	"sync/atomic"
)

// Entry is a PodDevicesEntry that keeps its JSON text once it has been
// encoded, and what hashing it adds to the checksum (see pieceSum). An entry
// never changes once made, so a writer that keeps its entries between writes
// (as the device manager does) encodes each of them once, however many files
// it appears in, and hashes its text only a bounded number of times.
//
// The embedded PodDevicesEntry, its DeviceIDs lists and its AllocResp must not
// be modified after NewEntry. An Entry is safe for concurrent use.
//
// It is part of the device manager's write path (see the package documentation).
type Entry struct {
	PodDevicesEntry
	text atomic.Pointer[cachedText]
	hash pieceSum
	// slot is 1 + the entry's slot in the file of the Store that last placed it, or 0 (see
	// slotModel); a Store checks that the slot holds the entry before it trusts it.
	slot atomic.Int64
}

// NewEntry returns e as an Entry. It does not copy e's lists or bytes: they
// are shared, and must not be modified afterwards.
func NewEntry(e PodDevicesEntry) *Entry { return &Entry{PodDevicesEntry: e} }

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
	hash pieceSum
	// serial tells this pair from every other, so that a Store remembers which pairs a file
	// holds without keeping them (see slotImage).
	serial uint64
}

// NewRegistered returns the pair resource: ids. ids is shared, not copied.
func NewRegistered(resource string, ids []string) *Registered {
	return &Registered{Resource: resource, IDs: ids, serial: registeredSerial.Add(1)}
}

var registeredSerial atomic.Uint64

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
	t := entryJSON(&e.PodDevicesEntry)
	e.text.Store(t)
	return t
}

// encoded returns the pair's JSON text ("resource":[ids]), computing it on first use.
func (r *Registered) encoded() *cachedText {
	if t := r.text.Load(); t != nil {
		return t
	}
	t := registeredJSON(r.Resource, r.IDs)
	r.text.Store(t)
	return t
}

// An Entry's and a Registered pair's text as pieces of the checksum.

func (e *Entry) sum() *pieceSum      { return &e.hash }
func (e *Entry) hashInto(s *hasher)  { s.entry(&e.PodDevicesEntry) }
func (e *Entry) hashLanes(h *lanes8) { lanesWrite(h, entryText(&e.PodDevicesEntry)) }
func (e *Entry) wholeSum() *textSum  { return entrySum(&e.PodDevicesEntry) }
func (e *Entry) textLen() int        { return entryTextLen(hashTablesOnce(), &e.PodDevicesEntry) }
func (e *Entry) asciiText() bool     { return isASCII(e.encoded().json) }

func (r *Registered) sum() *pieceSum { return &r.hash }
func (r *Registered) hashInto(s *hasher) {
	s.str(r.Resource)
	s.char(':')
	s.strList(r.IDs)
}
func (r *Registered) hashLanes(h *lanes8) {
	h.write(r.Resource)
	h.write(":")
	h.writeList(r.IDs)
}
func (r *Registered) textLen() int {
	return len(r.Resource) + 1 + strListTextLen(hashTablesOnce(), r.IDs)
}
func (r *Registered) asciiText() bool    { return isASCII(r.encoded().json) }
func (r *Registered) wholeSum() *textSum { return nil }

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
		p = &Prepared{}
	}
	reg, size, err := planPrepared(p)
	if err != nil {
		return nil, err
	}
	// A large file whose entries follow new states (an older pod left) is hashed on a second
	// goroutine while its JSON is put together; where the memos answer, hashing costs less
	// than the goroutine.
	sum := make(chan uint32, 1)
	hash := func() { sum <- checksumTail(checksumEntries(p.Entries), p.Registered == nil, reg) }
	if n := len(p.Entries); size >= parallelHashBytes && n > blockSlots && p.Entries[n/2].hash.whole.Load() != nil {
		go hash()
	} else {
		hash()
	}
	buf := make([]byte, 0, size)
	buf = append(buf, jsonFileHead...)
	buf = appendJoined(buf, p.Entries, p.Entries == nil, '[', ']', func(e *Entry) []byte { return e.encoded().json })
	buf = appendRegistered(buf, p.Registered == nil, reg)
	return appendChecksumTail(buf, <-sum), nil
}

// parallelHashBytes is the size of JSON from which EncodePrepared may hash on a second goroutine.
const parallelHashBytes = 64 << 10

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

func compareRegistered(a, b *Registered) int { return cmp.Compare(a.Resource, b.Resource) }

// The constant pieces of a Prepared file.
var (
	jsonFileHead   = []byte(`{"Data":{"PodDeviceEntries":`)
	jsonRegistered = []byte(`,"RegisteredDevices":`)
)

// appendJoined appends null when isNil, else the pieces' JSON separated by commas between
// open and close.
func appendJoined[T any](buf []byte, items []T, isNil bool, open, close byte, piece func(T) []byte) []byte {
	if isNil {
		return append(buf, "null"...)
	}
	buf = append(buf, open)
	for i, it := range items {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, piece(it)...)
	}
	return append(buf, close)
}

// appendRegistered appends the registered devices, reg sorted by resource (regNil for a nil
// map), and closes the Data object.
func appendRegistered(buf []byte, regNil bool, reg []*Registered) []byte {
	buf = append(buf, jsonRegistered...)
	buf = appendJoined(buf, reg, regNil, '{', '}', func(r *Registered) []byte { return r.encoded().json })
	return append(buf, '}')
}

// appendChecksumTail appends the end of the file: the checksum and the closing brace.
func appendChecksumTail(buf []byte, sum uint32) []byte {
	buf = append(buf, `,"Checksum":`...)
	return append(appendInt(buf, int64(sum)), '}')
}

// checksumEntries returns the checksum's state after the entry list of a file whose
// entries are given, in order: each entry's part comes from its pieceSum.
func checksumEntries(entries []*Entry) uint32 {
	t := hashTablesOnce()
	h := t.head.apply(fnvOffset32)
	if entries == nil {
		return t.nilText.apply(h)
	}
	h = step(h, '[')
	for i, e := range entries {
		if i > 0 {
			h = step(h, ' ')
		}
		h = applyPiece(h, e)
	}
	return step(h, ']')
}

// checksumTail returns the checksum of a file whose state after the entry list is h and
// whose registered pairs are reg (sorted by resource; regNil for a nil map).
func checksumTail(h uint32, regNil bool, reg []*Registered) uint32 {
	t := hashTablesOnce()
	h = t.reg.apply(h)
	if regNil {
		h = t.nilText.apply(h)
	} else {
		h = t.mapOpen.apply(h)
		for i, r := range reg {
			if i > 0 {
				h = step(h, ' ')
			}
			h = applyPiece(h, r)
		}
		h = step(h, ']')
	}
	return step(h, '}')
}

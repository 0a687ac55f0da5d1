package checkpoint

import (
	"io"
	"slices"
)

// The checksum is FNV-1a 32 over the text that k8s.io/utils/dump.ForHash
// (go-spew, "%#v", sorted keys) prints for the kubelet's unexported
// checkpoint.checkpointData value. docs/behaviour.md#checkpoint-checksum
// reduces that printer to a small grammar; this file emits the grammar directly, with no reflection, straight
// into the hash (the text itself is only materialised for tests and for the
// V1 checksum). The go-spew based oracle lives in the tests only.

const (
	fnvOffset32 uint32 = 0x811c9dc5
	fnvPrime32  uint32 = 0x01000193
)

// Grammar fragments (docs/behaviour.md#checkpoint-checksum). The V2 type names are literally part of the
// hashed bytes.
const (
	gHead      = "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"
	gReg       = " RegisteredDevices:(map[string][]string)"
	gPodUID    = "{PodUID:(string)"
	gContainer = " ContainerName:(string)"
	gResource  = " ResourceName:(string)"
	gDevices   = " DeviceIDs:(checkpoint.DevicesPerNUMA)"
	gDevicesV1 = " DeviceIDs:([]string)"
	gAllocResp = " AllocResp:([]uint8)"
	gNil       = "<nil>"

	// V1 names as go-spew printed them for the 1.20-1.29 checkpointDataV1
	// type; the V1 checksum renames them afterwards (docs/behaviour.md#legacy-v1-checkpoints).
	gHeadV1 = "(checkpoint.checkpointDataV1){PodDeviceEntries:([]checkpoint.PodDevicesEntryV1)"
)

// decDigits is the decimal text of a byte value: digits in d[:n].
type decDigits struct {
	d [3]byte
	n uint8
}

var byteDec = func() (t [256]decDigits) {
	for i := range t {
		switch {
		case i >= 100:
			t[i] = decDigits{[3]byte{byte('0' + i/100), byte('0' + i/10%10), byte('0' + i%10)}, 3}
		case i >= 10:
			t[i] = decDigits{[3]byte{byte('0' + i/10), byte('0' + i%10)}, 2}
		default:
			t[i] = decDigits{[3]byte{byte('0' + i)}, 1}
		}
	}
	return t
}()

func (d *decDigits) string() string { return string(d.d[:d.n]) }

// fnv1a folds p into the FNV-1a 32 state h.
func fnv1a[T string | []byte](h uint32, p T) uint32 {
	for i := 0; i < len(p); i++ {
		h ^= uint32(p[i])
		h *= fnvPrime32
	}
	return h
}

// hasher emits the grammar into a running FNV-1a 32 state. With keepText it
// also appends the text to text, for tests and for the V1 checksum. With sum (and
// keepText) it gathers what it emits into a textSum (see entrySum).
type hasher struct {
	t        *hashTables
	h        uint32
	keepText bool
	text     []byte
	ikeys    []int64
	skeys    []string
	sum      *sumBuilder
}

func newHasher(keepText bool) hasher {
	return hasher{t: hashTablesOnce(), h: fnvOffset32, keepText: keepText}
}

func (s *hasher) frag(f *fragment) {
	if s.keepText {
		s.text = append(s.text, f.s...)
	}
	s.h = f.apply(s.h)
}

func (s *hasher) char(c byte) {
	if s.keepText {
		s.text = append(s.text, c)
	}
	s.h = (s.h ^ uint32(c)) * fnvPrime32
}

func (s *hasher) str(x string) {
	if s.keepText {
		s.text = append(s.text, x...)
	}
	s.h = fnv1a(s.h, x)
}

func (s *hasher) int(v int64) {
	var tmp [20]byte
	b := appendInt(tmp[:0], v)
	if s.keepText {
		s.text = append(s.text, b...)
	}
	s.h = fnv1a(s.h, b)
}

// strList emits STRLIST: <nil>, [] or [a b c], strings raw.
func (s *hasher) strList(l []string) {
	if l == nil {
		s.frag(s.t.nilText)
		return
	}
	s.char('[')
	for i, x := range l {
		if i > 0 {
			s.char(' ')
		}
		s.str(x)
	}
	s.char(']')
}

// bytesDec emits BYTES: <nil>, [] or [10 32 255], each byte in decimal. All
// bytes after the first go through the per-byte tables: one multiply and two
// lookups per byte instead of hashing 2 to 4 characters.
func (s *hasher) bytesDec(b []byte) {
	if b == nil {
		s.frag(s.t.nilText)
		return
	}
	s.char('[')
	if s.sum != nil && len(b) > 1 {
		s.str(byteDec[b[0]].string())
		s.sum.text(s)
		s.sum.join(s.t.decimalSum(b[1:]))
	} else if len(b) > 0 {
		d := &byteDec[b[0]]
		if s.keepText {
			s.text = append(s.text, d.d[:d.n]...)
			for _, c := range b[1:] {
				d := &byteDec[c]
				s.text = append(s.text, ' ')
				s.text = append(s.text, d.d[:d.n]...)
			}
		}
		s.h = s.t.decimalBytes(fnv1a(s.h, d.d[:d.n]), b[1:])
	}
	s.char(']')
}

// decimalBytes returns the state after hashing " <decimal of c>" for each byte
// c of b, starting from h: two table lookups per byte, and a multiply and an
// add per pair of bytes on the state's chain (see hashTables). The
// loop is the checksum's hottest (most of the hashed text is AllocResp bytes)
// and is kept out of line on purpose: inlined into bytesDec, the same
// instructions ran about 17% slower on the 1000-pod benchmark data.
//
//go:noinline
func (t *hashTables) decimalBytes(h uint32, b []byte) uint32 {
	// l is a uint holding a byte: loading it needs no zero extension on the
	// low-byte chain, the loop's critical path, and the compiler still
	// proves every index in range.
	l := uint(uint8(h))
	// Two bytes per step: h = m1*(m0*h + a0) + a1 = (m1*m0)*h + (m1*a0 + a1), so
	// the state's own chain is one multiply and one add per pair, and the
	// products of the terms are off it.
	i := 0
	for ; i+1 < len(b); i += 2 {
		c0, c1 := b[i], b[i+1]
		a0 := t.byteAdd[c0][l&63]
		l = uint(t.byteNext[c0][l])
		a1 := t.byteAdd[c1][l&63]
		l = uint(t.byteNext[c1][l])
		m1 := t.byteMul[c1]
		h = (m1*t.byteMul[c0])*h + (m1*a0 + a1)
	}
	if i < len(b) {
		c := b[i]
		h = t.byteMul[c]*h + t.byteAdd[c][l&63]
	}
	return h
}

// devMap emits DEVMAP with keys in ascending numeric order.
func (s *hasher) devMap(m DevicesPerNUMA) { listMap(s, m, &s.ikeys) }

// regMap emits REG with keys in byte-wise ascending order.
func (s *hasher) regMap(m map[string][]string) { listMap(s, m, &s.skeys) }

// listMap emits a map of string lists: <nil>, or "map[" then k:STRLIST pairs
// in ascending key order, separated by spaces, then "]". Numbers are
// printed in decimal and strings raw; keys is the hasher's reusable buffer
// for sorting them. int64 and string have different GC shapes, so each
// instantiation is compiled for its key type and the type switch below
// resolves at compile time: no interface conversion, no allocation.
func listMap[K int64 | string](s *hasher, m map[K][]string, keys *[]K) {
	if m == nil {
		s.frag(s.t.nilText)
		return
	}
	ks := (*keys)[:0]
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	*keys = ks
	s.frag(s.t.mapOpen)
	for i, k := range ks {
		if i > 0 {
			s.char(' ')
		}
		switch k := any(k).(type) {
		case int64:
			s.int(k)
		case string:
			s.str(k)
		}
		s.char(':')
		s.strList(m[k])
	}
	s.char(']')
}

// entryHead emits the start of an ENTRY, up to the DeviceIDs field.
func (s *hasher) entryHead(uid, ctr, res string) {
	s.frag(s.t.podUID)
	s.str(uid)
	s.frag(s.t.container)
	s.str(ctr)
	s.frag(s.t.resource)
	s.str(res)
}

// entryTail emits the AllocResp field and closes the ENTRY.
func (s *hasher) entryTail(alloc []byte) {
	s.frag(s.t.allocResp)
	s.bytesDec(alloc)
	s.char('}')
}

// entry emits one V2 ENTRY.
func (s *hasher) entry(e *PodDevicesEntry) {
	s.entryHead(e.PodUID, e.ContainerName, e.ResourceName)
	s.frag(s.t.devices)
	s.devMap(e.DeviceIDs)
	s.entryTail(e.AllocResp)
}

// data emits HASHED for the V2 layout.
func (s *hasher) data(d *Data) {
	s.frag(s.t.head)
	s.entries(d.PodDeviceEntries == nil, len(d.PodDeviceEntries), func(i int) {
		s.entry(&d.PodDeviceEntries[i])
	})
	s.frag(s.t.reg)
	s.regMap(d.RegisteredDevices)
	s.char('}')
}

// entries emits the PodDeviceEntries list of either layout: <nil> when
// isNil, else "[", the n entries separated by spaces, each emitted by entry,
// then "]".
func (s *hasher) entries(isNil bool, n int, entry func(i int)) {
	if isNil {
		s.frag(s.t.nilText)
		return
	}
	s.char('[')
	for i := range n {
		if i > 0 {
			s.char(' ')
		}
		entry(i)
	}
	s.char(']')
}

// appendInt appends the decimal form of v.
func appendInt(b []byte, v int64) []byte {
	if v >= 0 && v < 10 {
		return append(b, byte('0'+v))
	}
	var tmp [20]byte
	i := len(tmp)
	u := uint64(v)
	if v < 0 {
		u = -u
	}
	for u >= 10 {
		i--
		tmp[i] = byte('0' + u%10)
		u /= 10
	}
	i--
	tmp[i] = byte('0' + u)
	if v < 0 {
		b = append(b, '-')
	}
	return append(b, tmp[i:]...)
}

// Checksum is checkpoint.Checksum. A nil d is treated as the zero Data; d must not be
// modified during the call.
func Checksum(d *Data) uint32 {
	if d == nil {
		d = &Data{}
	}
	s := newHasher(false)
	s.data(d)
	return s.h
}

// writeHashInput writes the text whose FNV-1a 32 sum is Checksum(d). It
// exists for tests and tools that compare the text with the kubelet's.
func writeHashInput(w io.Writer, d *Data) error {
	if d == nil {
		d = &Data{}
	}
	s := newHasher(true)
	s.data(d)
	_, err := w.Write(s.text)
	return err
}

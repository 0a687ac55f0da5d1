package checkpoint

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"math"
	"unicode/utf8"
)

// parseV2Fast decodes the V2 file shape without reflection, in one pass over
// b. It handles only input whose meaning is plain: exactly the keys Encode
// writes (exact case, each at most once), strings without escapes that are
// valid UTF-8, canonical decimal NUMA keys, a non-negative decimal Checksum
// that fits uint64, values of the expected JSON types, whitespace anywhere
// JSON allows it and nothing after the closing brace.
//
// For such input the result is exactly what encoding/json gives for the same
// bytes into the value parseV2 starts from: null slices and maps are nil, []
// and {} are non-nil and empty, a missing key keeps parseV2's initial empty
// entry list and registered-device map, "" is a non-nil empty AllocResp, and
// AllocResp is decoded the way encoding/json does it (same length and
// capacity). For anything else it reports false, never an error, and the
// caller decodes b with encoding/json, which owns every quirk (case-folded
// keys, unknown keys, duplicates, escapes, U+FFFD replacement) and every
// error text. It never panics and does not retain b.
func parseV2Fast(b []byte) (*fileV2, bool) {
	p := fastParser{b: b}
	f := &fileV2{Data: Data{
		PodDeviceEntries:  []PodDevicesEntry{},
		RegisteredDevices: map[string][]string{},
	}}
	if !p.file(f) {
		return nil, false
	}
	p.skipSpace()
	if p.i != len(p.b) {
		return nil, false
	}
	return f, true
}

// fastParser is the cursor of parseV2Fast. Every method returns false as
// soon as the input leaves the handled subset; the cursor is then useless.
type fastParser struct {
	b []byte
	i int
	// ids collects one string list before it is copied into a slice of
	// exactly its length.
	ids []string
	// The previous entry's names: consecutive entries usually share the pod,
	// the container or the resource, so a match reuses the string.
	lastPod, lastContainer, lastResource string
}

// Bits recording which keys of one object were seen, to refuse duplicates.
const (
	seenData uint16 = 1 << iota
	seenChecksum
	seenEntries
	seenRegistered
	seenPodUID
	seenContainer
	seenResource
	seenDeviceIDs
	seenAllocResp
)

// file parses the outer object {"Data":{...},"Checksum":N}.
func (p *fastParser) file(f *fileV2) bool {
	var seen uint16
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "Data":
			return mark(&seen, seenData) && p.data(&f.Data)
		case "Checksum":
			return mark(&seen, seenChecksum) && p.uint64(&f.Checksum)
		}
		return false
	})
}

// data parses the Data object. "Data": null is left to encoding/json.
func (p *fastParser) data(d *Data) bool {
	var seen uint16
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "PodDeviceEntries":
			return mark(&seen, seenEntries) && p.entries(&d.PodDeviceEntries)
		case "RegisteredDevices":
			return mark(&seen, seenRegistered) && p.registered(&d.RegisteredDevices)
		}
		return false
	})
}

// entries parses the entry list: null gives nil, [] keeps the non-nil empty
// slice *dst starts with.
func (p *fastParser) entries(dst *[]PodDevicesEntry) bool {
	if p.null() {
		*dst = nil
		return true
	}
	return p.array(func() bool {
		*dst = append(*dst, PodDevicesEntry{})
		return p.entry(&(*dst)[len(*dst)-1])
	})
}

// entry parses one entry object into the zero entry e.
func (p *fastParser) entry(e *PodDevicesEntry) bool {
	var seen uint16
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "PodUID":
			return mark(&seen, seenPodUID) && p.name(&e.PodUID, &p.lastPod)
		case "ContainerName":
			return mark(&seen, seenContainer) && p.name(&e.ContainerName, &p.lastContainer)
		case "ResourceName":
			return mark(&seen, seenResource) && p.name(&e.ResourceName, &p.lastResource)
		case "DeviceIDs":
			return mark(&seen, seenDeviceIDs) && p.deviceIDs(&e.DeviceIDs)
		case "AllocResp":
			return mark(&seen, seenAllocResp) && p.allocResp(&e.AllocResp)
		}
		return false
	})
}

// deviceIDs parses the per-NUMA map: null gives nil, {} an empty map.
func (p *fastParser) deviceIDs(dst *DevicesPerNUMA) bool {
	if p.null() {
		*dst = nil
		return true
	}
	m := DevicesPerNUMA{}
	*dst = m
	return p.object(func(key []byte) bool {
		node, ok := canonicalInt64(key)
		if !ok {
			return false
		}
		if _, dup := m[node]; dup {
			return false
		}
		ids, ok := p.strings()
		m[node] = ids
		return ok
	})
}

// registered parses RegisteredDevices into the non-nil empty map *dst
// starts with; null gives nil.
func (p *fastParser) registered(dst *map[string][]string) bool {
	if p.null() {
		*dst = nil
		return true
	}
	m := *dst
	return p.object(func(key []byte) bool {
		if _, dup := m[string(key)]; dup {
			return false
		}
		name := p.lastResource // usually the resource of the last entry
		if string(key) != name {
			name = string(key)
		}
		ids, ok := p.strings()
		m[name] = ids
		return ok
	})
}

// allocResp parses the base64 AllocResp: null gives nil, "" a non-nil empty
// slice. Like encoding/json it decodes as base64.StdEncoding does
// into a DecodedLen buffer; input that fails to decode is left to encoding/json.
func (p *fastParser) allocResp(dst *[]byte) bool {
	if p.null() {
		*dst = nil
		return true
	}
	p.skipSpace()
	if p.peek() != '"' {
		return false
	}
	end := bytes.IndexByte(p.b[p.i+1:], '"')
	if end < 0 {
		return false
	}
	s := p.b[p.i+1 : p.i+1+end]
	out := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(out, s)
	// A successful decode leaves only the base64 alphabet, '=' and the line
	// breaks the decoder skips; raw line breaks are not valid JSON. This
	// saves str's byte checks on the largest values of the file.
	if err != nil || bytes.IndexByte(s, '\n') >= 0 || bytes.IndexByte(s, '\r') >= 0 {
		return false
	}
	p.i += end + 2
	*dst = out[:n]
	return true
}

// strings parses a list of strings: null gives nil, [] a non-nil empty
// slice, otherwise a slice of exactly the list's length.
func (p *fastParser) strings() ([]string, bool) {
	if p.null() {
		return nil, true
	}
	p.ids = p.ids[:0]
	ok := p.array(func() bool {
		s, ok := p.str()
		if ok {
			p.ids = append(p.ids, string(s))
		}
		return ok
	})
	if !ok {
		return nil, false
	}
	out := make([]string, len(p.ids))
	copy(out, p.ids)
	return out, true
}

// name parses a string field, reusing *last when the text is the same.
func (p *fastParser) name(dst, last *string) bool {
	s, ok := p.str()
	if !ok {
		return false
	}
	if string(s) != *last {
		*last = string(s)
	}
	*dst = *last
	return true
}

// uint64 parses a plain non-negative decimal that fits uint64: "0" or a
// digit string without a leading zero. Fractions, exponents and signs are
// left to encoding/json.
func (p *fastParser) uint64(dst *uint64) bool {
	p.skipSpace()
	start := p.i
	var v uint64
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		d := uint64(p.b[p.i] - '0')
		if v > (math.MaxUint64-d)/10 {
			return false
		}
		v = v*10 + d
		p.i++
	}
	n := p.i - start
	if n == 0 || (n > 1 && p.b[start] == '0') {
		return false
	}
	*dst = v
	return true
}

// canonicalInt64 parses a NUMA key written the way encoding/json writes an
// int64 map key: "0", or an optional '-' and digits without a leading zero,
// within range. "-0", "+1", "01" and the like are not canonical.
func canonicalInt64(s []byte) (int64, bool) {
	neg := len(s) > 0 && s[0] == '-'
	digits := s
	if neg {
		digits = s[1:]
	}
	// 19 digits cannot overflow uint64; anything longer overflows int64.
	if len(digits) == 0 || len(digits) > 19 || (digits[0] == '0' && (len(digits) > 1 || neg)) {
		return 0, false
	}
	var v uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	switch {
	case neg && v <= 1<<63:
		return int64(-v), true // -v wraps to math.MinInt64 for 1<<63
	case !neg && v <= math.MaxInt64:
		return int64(v), true
	}
	return 0, false
}

// mark records a key's bit in *seen and reports whether it was new.
func mark(seen *uint16, bit uint16) bool {
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// object parses {"key":value,...}, calling member with the cursor after the
// colon for each key; member parses the value.
func (p *fastParser) object(member func(key []byte) bool) bool {
	if !p.expect('{') {
		return false
	}
	if p.peek() == '}' {
		p.i++
		return true
	}
	for {
		key, ok := p.str()
		if !ok || !p.expect(':') || !member(key) {
			return false
		}
		p.skipSpace()
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

// array parses [value,...], calling elem once per element; [] yields no
// call.
func (p *fastParser) array(elem func() bool) bool {
	if !p.expect('[') {
		return false
	}
	if p.peek() == ']' {
		p.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		p.skipSpace()
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return true
		default:
			return false
		}
	}
}

// null consumes the literal null if it comes next.
func (p *fastParser) null() bool {
	p.skipSpace()
	if len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

// expect consumes c, after optional whitespace, and then any whitespace.
func (p *fastParser) expect(c byte) bool {
	p.skipSpace()
	if p.peek() != c {
		return false
	}
	p.i++
	p.skipSpace()
	return true
}

// peek returns the byte at the cursor, or 0 at the end of input (0 is never
// valid there, so callers treat it as a mismatch).
func (p *fastParser) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *fastParser) skipSpace() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// str parses a string and returns its raw contents, a sub-slice of the
// input. Strings with an escape, a control character or bytes that are not
// valid UTF-8 are refused: only for plain strings are the raw bytes the
// decoded value.
func (p *fastParser) str() ([]byte, bool) {
	p.skipSpace()
	if p.peek() != '"' {
		return nil, false
	}
	b := p.b
	start := p.i + 1
	i := start
	nonASCII := false
	for {
		for i+8 <= len(b) && plainWord(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			return nil, false
		}
		switch c := b[i]; {
		case c == '"':
			s := b[start:i]
			if nonASCII && !utf8.Valid(s) {
				return nil, false
			}
			p.i = i + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			nonASCII = true
		}
		i++
	}
}

// plainWord reports whether the eight bytes of v are all printable ASCII
// other than '"' and '\\', tested at once with the zero-byte tricks that
// safePrefix uses: a byte's high bit ends up set if it is non-ASCII, below
// 0x20, or equal to '"' or '\\'.
func plainWord(v uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q, bs := v^(ones*'"'), v^(ones*'\\') // zero bytes where v has '"' or '\\'
	return (v|(v-ones*0x20)|(q-ones)&^q|(bs-ones)&^bs)&highs == 0
}

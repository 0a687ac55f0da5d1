package checkpoint

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// parallelChecksumEntries is the entry count from which Encode emits the
// JSON on a second goroutine while it computes the checksum. Below it the
// goroutine would cost more than it saves.
const parallelChecksumEntries = 128

// Encode returns the whole checkpoint file for d: {"Data":...,"Checksum":N}
// with no trailing newline, byte for byte what the kubelet's encoding/json
// writes for the same values (keys in field order, map keys sorted as
// strings, HTML characters escaped, []byte as standard base64, nil as null).
// The checksum is Checksum(d).
//
// For large data (parallelChecksumEntries entries or more) the JSON is
// emitted on a second goroutine while the checksum is computed; Encode joins
// it before returning, so no goroutine outlives the call. d is only read, by
// both, and must not be modified during the call.
//
// Encode fails only with ErrInvalidUTF8: such a string would be written as
// U+FFFD while the checksum covers its original bytes, so the file could never
// be verified. A nil d encodes as the zero Data.
func Encode(d *Data) ([]byte, error) {
	if d == nil {
		d = &Data{}
	}
	var (
		w   jsonWriter
		sum uint32
		buf []byte
	)
	if len(d.PodDeviceEntries) >= parallelChecksumEntries {
		// The checksum, a chain of dependent steps, runs on this goroutine, which already
		// holds a processor; the JSON, and the allocation of the output, go to the new one.
		done := make(chan []byte, 1)
		go func() { done <- w.data(make([]byte, 0, encodedSizeHint(d)), d) }()
		sum = Checksum(d)
		buf = <-done
	} else {
		sum = Checksum(d)
		buf = w.data(make([]byte, 0, encodedSizeHint(d)), d)
	}
	if w.badUTF8 {
		return nil, fmt.Errorf("%w: %q", ErrInvalidUTF8, w.badString)
	}
	buf = append(buf, `,"Checksum":`...)
	buf = strconv.AppendUint(buf, uint64(sum), 10)
	return append(buf, '}'), nil
}

// encodedSizeHint estimates the encoded size, so the output is allocated once
// in the common case. Overestimating slightly is cheaper than growing.
func encodedSizeHint(d *Data) int {
	n := 96
	for i := range d.PodDeviceEntries {
		n += entrySizeHint(&d.PodDeviceEntries[i])
	}
	return n + regSizeHint(d.RegisteredDevices)
}

// entrySizeHint estimates, slightly over, the size of one entry's JSON object.
func entrySizeHint(e *PodDevicesEntry) int {
	n := 96 + len(e.PodUID) + len(e.ContainerName) + len(e.ResourceName)
	n += base64.StdEncoding.EncodedLen(len(e.AllocResp))
	for _, ids := range e.DeviceIDs {
		n += 26
		for _, id := range ids {
			n += len(id) + 3
		}
	}
	return n + n/16
}

// regSizeHint estimates the size of the RegisteredDevices object.
func regSizeHint(m map[string][]string) int {
	n := 0
	for k, ids := range m {
		n += len(k) + 6
		for _, id := range ids {
			n += len(id) + 3
		}
	}
	return n + n/16
}

// jsonWriter holds the encoder's scratch state. The emit functions take and
// return the output slice rather than storing it in the struct, which keeps
// the hot appends free of GC write barriers.
type jsonWriter struct {
	ikeys     []int64
	skeys     []string
	badUTF8   bool
	badString string
}

// data emits the file up to and including the Data object.
func (w *jsonWriter) data(buf []byte, d *Data) []byte {
	buf = append(buf, `{"Data":{"PodDeviceEntries":`...)
	if d.PodDeviceEntries == nil {
		buf = append(buf, "null"...)
	} else {
		buf = append(buf, '[')
		for i := range d.PodDeviceEntries {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = w.entry(buf, &d.PodDeviceEntries[i])
		}
		buf = append(buf, ']')
	}
	buf = append(buf, `,"RegisteredDevices":`...)
	buf = w.regMap(buf, d.RegisteredDevices)
	return append(buf, '}')
}

func (w *jsonWriter) entry(buf []byte, e *PodDevicesEntry) []byte {
	buf = w.entryHead(buf, e)
	if e.AllocResp == nil {
		buf = append(buf, "null"...)
	} else {
		buf = append(buf, '"')
		buf = base64.StdEncoding.AppendEncode(buf, e.AllocResp)
		buf = append(buf, '"')
	}
	return append(buf, '}')
}

// entryHead emits an entry's object up to the AllocResp value.
func (w *jsonWriter) entryHead(buf []byte, e *PodDevicesEntry) []byte {
	buf = append(buf, `{"PodUID":`...)
	buf = w.str(buf, e.PodUID)
	buf = append(buf, `,"ContainerName":`...)
	buf = w.str(buf, e.ContainerName)
	buf = append(buf, `,"ResourceName":`...)
	buf = w.str(buf, e.ResourceName)
	buf = append(buf, `,"DeviceIDs":`...)
	buf = w.devMap(buf, e.DeviceIDs)
	return append(buf, `,"AllocResp":`...)
}

// canonicalEntry reports whether text is byte for byte what entry writes for
// e, which text was parsed into. Only the AllocResp's base64 is not written
// again: it is canonical when its last quantum leaves no stray bits, as text
// that decodes to e.AllocResp with no line breaks (parseV2Fast's rule) has
// the right length and padding already.
func (w *jsonWriter) canonicalEntry(e *PodDevicesEntry, text []byte) bool {
	scratch := headScratch.Get().(*[]byte)
	head := w.entryHead((*scratch)[:0], e)
	rest, ok := bytes.CutPrefix(text, head)
	if cap(head) <= maxHeadScratch {
		*scratch = head[:0]
		headScratch.Put(scratch)
	}
	if !ok {
		return false
	}
	if e.AllocResp == nil {
		return string(rest) == "null}"
	}
	if len(rest) < 3 || rest[0] != '"' || string(rest[len(rest)-2:]) != `"}` {
		return false
	}
	b64 := rest[1 : len(rest)-2]
	if len(b64) != base64.StdEncoding.EncodedLen(len(e.AllocResp)) {
		return false
	}
	// The character before the padding carries 4 (one byte in the last
	// quantum) or 2 (two bytes) bits that must be zero.
	switch len(e.AllocResp) % 3 {
	case 1:
		return base64Value(b64[len(b64)-3])&(0x0f|notBase64) == 0
	case 2:
		return base64Value(b64[len(b64)-2])&(0x03|notBase64) == 0
	}
	return true
}

// headScratch holds the buffers canonicalEntry writes an entry's head into to compare it
// with the text read: the first write after a restart checks every restored entry, and the
// heads are garbage once compared. Buffers over maxHeadScratch bytes are not kept.
var headScratch = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxHeadScratch = 64 << 10

// base64Value is the six bits the standard alphabet's character c stands for, or notBase64
// for any other character.
func base64Value(c byte) int {
	if v := strings.IndexByte(base64Alphabet, c); v >= 0 {
		return v
	}
	return notBase64
}

// notBase64 is base64Value's bit for a character outside the alphabet, above the six bits.
const notBase64 = 0x40

// base64Alphabet is the standard base64 alphabet, in value order.
const base64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// compareDecimal orders int64 values by their decimal text, the order
// encoding/json uses for integer map keys ("-1" < "10" < "2").
func compareDecimal(a, b int64) int {
	var x, y [20]byte
	return bytes.Compare(appendInt(x[:0], a), appendInt(y[:0], b))
}

func (w *jsonWriter) devMap(buf []byte, m DevicesPerNUMA) []byte {
	if m == nil {
		return append(buf, "null"...)
	}
	w.ikeys = w.ikeys[:0]
	for k := range m {
		w.ikeys = append(w.ikeys, k)
	}
	if len(w.ikeys) > 1 {
		slices.SortFunc(w.ikeys, compareDecimal)
	}
	buf = append(buf, '{')
	for i, k := range w.ikeys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '"')
		buf = appendInt(buf, k)
		buf = append(buf, '"', ':')
		buf = w.strList(buf, m[k])
	}
	return append(buf, '}')
}

func (w *jsonWriter) regMap(buf []byte, m map[string][]string) []byte {
	if m == nil {
		return append(buf, "null"...)
	}
	w.skeys = w.skeys[:0]
	for k := range m {
		w.skeys = append(w.skeys, k)
	}
	slices.Sort(w.skeys)
	buf = append(buf, '{')
	for i, k := range w.skeys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = w.str(buf, k)
		buf = append(buf, ':')
		buf = w.strList(buf, m[k])
	}
	return append(buf, '}')
}

func (w *jsonWriter) strList(buf []byte, l []string) []byte {
	if l == nil {
		return append(buf, "null"...)
	}
	buf = append(buf, '[')
	for i, s := range l {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = w.str(buf, s)
	}
	return append(buf, ']')
}

func (w *jsonWriter) str(buf []byte, s string) []byte {
	buf, ok := appendJSONString(buf, s)
	if !ok && !w.badUTF8 {
		w.badUTF8, w.badString = true, s
	}
	return buf
}

// jsonSafeASCII marks the ASCII bytes encoding/json copies verbatim when it
// escapes HTML: printable, and not one of " \ < > &.
var jsonSafeASCII = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string exactly as encoding/json does
// with HTML escaping on. It reports false if s is not valid UTF-8 (each
// invalid byte is then written as \ufffd, as encoding/json does).
func appendJSONString(dst []byte, s string) ([]byte, bool) {
	valid := true
	dst = append(dst, '"')
	start := 0
	i := safePrefix(s)
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if jsonSafeASCII[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			valid = false
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), valid
}

// safePrefix returns how many leading bytes of s, in whole 8-byte words, need no escaping:
// printable ASCII other than '"', '\\', '<', '>' and '&'. It tests a word at a time with the
// classic SWAR zero-byte tricks, so typical IDs and names are copied without a per-byte
// table lookup.
func safePrefix(s string) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	zero := func(v uint64) uint64 { return (v - ones) & ^v & highs }
	i := 0
	for ; i+8 <= len(s); i += 8 {
		v := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if v&highs != 0 || // non-ASCII
			(v-ones*0x20)&^v&highs != 0 || // a control character (< 0x20)
			zero(v^(ones*'"'))|zero(v^(ones*'\\'))|zero(v^(ones*'<'))|zero(v^(ones*'>'))|zero(v^(ones*'&')) != 0 {
			break
		}
	}
	return i
}

package checkpoint

import (
	"encoding/base64"
	"encoding/binary"
	"slices"
	"sync"
)

// base64Pairs maps every 12-bit value to its two standard-base64 characters, so three input
// bytes become four output characters with two table loads. The AllocResp fields are most of a
// large checkpoint's bytes; this is about twice as fast as encoding/base64's per-character
// loop, and the output is identical (FuzzEncode holds it to encoding/json's).
var base64Pairs = sync.OnceValue(func() *[4096]uint16 {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	var t [4096]uint16
	for i := range t {
		t[i] = uint16(alphabet[i>>6]) | uint16(alphabet[i&63])<<8
	}
	return &t
})

// appendBase64 appends the standard base64 encoding of src (with padding) to dst. Six input
// bytes at a time become eight characters, four table loads and one store.
func appendBase64(dst, src []byte) []byte {
	if !fastPath(offBase64) {
		return base64.StdEncoding.AppendEncode(dst, src)
	}
	n := len(src) / 3 * 3
	out := len(dst)
	dst = slices.Grow(dst, n/3*4)[:out+n/3*4]
	pairs := base64Pairs()
	i := 0
	for ; i+8 <= len(src) && i+6 <= n; i += 6 {
		v := binary.BigEndian.Uint64(src[i:]) >> 16 // the next six bytes
		binary.LittleEndian.PutUint64(dst[out:], uint64(pairs[v>>36])|uint64(pairs[v>>24&0xfff])<<16|
			uint64(pairs[v>>12&0xfff])<<32|uint64(pairs[v&0xfff])<<48)
		out += 8
	}
	for ; i < n; i += 3 {
		v := uint32(src[i])<<16 | uint32(src[i+1])<<8 | uint32(src[i+2])
		binary.LittleEndian.PutUint16(dst[out:], pairs[v>>12])
		binary.LittleEndian.PutUint16(dst[out+2:], pairs[v&0xfff])
		out += 4
	}
	return base64.StdEncoding.AppendEncode(dst, src[n:])
}

// base64Decode holds, for each of the four positions in a quantum, every character's six bits
// shifted to their place in the quantum's 24 bits, and badBase64 for a character outside the
// standard alphabet, so that a quantum is four loads and three ORs.
var base64Decode = sync.OnceValue(func() *[4][256]uint32 {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	var t [4][256]uint32
	for pos := range t {
		for c := range t[pos] {
			t[pos][c] = badBase64
		}
		for v := range len(alphabet) {
			t[pos][alphabet[v]] = uint32(v) << (18 - 6*pos)
		}
	}
	return &t
})

// badBase64 marks a character outside the alphabet: it survives ORing with valid values.
const badBase64 = 1 << 31

// decodeBase64 is base64.StdEncoding.Decode(dst, src): the same bytes and count, and the same
// errors, which it leaves to encoding/base64 along with the last quantum (where padding may
// be) and any input that is not a whole number of quanta. dst must have room for
// DecodedLen(len(src)) bytes.
func decodeBase64(dst, src []byte) (int, error) {
	if len(src)%4 != 0 || len(src) == 0 || !fastPath(offBase64) {
		return base64.StdEncoding.Decode(dst, src)
	}
	t := base64Decode()
	body := len(src) - 4 // the last quantum goes to encoding/base64
	n, i := 0, 0
	// Two quanta at a time make six bytes, stored with one eight-byte write while at least
	// two bytes of dst stay after them.
	for ; i+8 <= body && n+8 <= len(dst); i += 8 {
		v := t[0][src[i]] | t[1][src[i+1]] | t[2][src[i+2]] | t[3][src[i+3]]
		w := t[0][src[i+4]] | t[1][src[i+5]] | t[2][src[i+6]] | t[3][src[i+7]]
		if (v|w)&badBase64 != 0 {
			return base64.StdEncoding.Decode(dst, src)
		}
		binary.BigEndian.PutUint64(dst[n:], uint64(v)<<40|uint64(w)<<16)
		n += 6
	}
	for ; i < body; i += 4 {
		v := t[0][src[i]] | t[1][src[i+1]] | t[2][src[i+2]] | t[3][src[i+3]]
		if v&badBase64 != 0 {
			return base64.StdEncoding.Decode(dst, src)
		}
		dst[n], dst[n+1], dst[n+2] = byte(v>>16), byte(v>>8), byte(v)
		n += 3
	}
	m, err := base64.StdEncoding.Decode(dst[n:], src[body:])
	if err != nil {
		// The error's offset counts from the start of src, as encoding/base64's would.
		return base64.StdEncoding.Decode(dst, src)
	}
	return n + m, nil
}

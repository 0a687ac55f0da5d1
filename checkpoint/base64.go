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

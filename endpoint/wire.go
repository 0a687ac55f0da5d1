package endpoint

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// The protobuf wire primitives of protowire, over a string: the codec decodes a device list
// from one string holding the whole message, which its devices' strings are cut from. Each
// returns what its protowire namesake returns for the same bytes, including the negative
// lengths that protowire.ParseError turns into errors.

// Negative lengths, as protowire numbers them.
const (
	errCodeTruncated   = -1
	errCodeFieldNumber = -2
	errCodeOverflow    = -3
)

// consumeVarint is protowire.ConsumeVarint.
func consumeVarint(s string) (uint64, int) {
	var v uint64
	for i := 0; i < 10; i++ {
		if i == len(s) {
			return 0, errCodeTruncated
		}
		c := uint64(s[i])
		if i == 9 && c > 1 {
			return 0, errCodeOverflow
		}
		v |= c & 0x7f << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, errCodeOverflow
}

// consumeTag is protowire.ConsumeTag.
func consumeTag(s string) (protowire.Number, protowire.Type, int) {
	v, n := consumeVarint(s)
	if n < 0 {
		return 0, 0, n
	}
	if v>>3 < uint64(protowire.MinValidNumber) || v>>3 > math.MaxInt32 {
		return 0, 0, errCodeFieldNumber
	}
	return protowire.Number(v >> 3), protowire.Type(v & 7), n
}

// consumeBytes is protowire.ConsumeBytes: the value of a length-delimited field and the
// length of the whole field.
func consumeBytes(s string) (string, int) {
	m, n := consumeVarint(s)
	if n < 0 {
		return "", n
	}
	if m > uint64(len(s)-n) {
		return "", errCodeTruncated
	}
	return s[n : n+int(m)], n + int(m)
}

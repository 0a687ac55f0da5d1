package checkpoint

import (
	"strconv"
	"sync"
)

// An FNV-1a 32 step, h = (h ^ c) * p, only XORs into the low byte, so for any fixed text s
// fnv(h, s) == p^len(s) * h + add_s[h & 0xff], and the low byte after s depends only on the
// low byte before it (docs/checkpoint-internals.md#checksum). A constant piece of text then
// costs one multiply and one lookup, whatever its length. The tests prove the tables
// identical to plain FNV-1a over the text.

// fragment is a constant piece of grammar text with its FNV-1a transform.
type fragment struct {
	s   string
	mul uint32      // p^len(s)
	add [256]uint32 // indexed by the incoming low byte
}

func newFragment(s string) *fragment {
	f := &fragment{s: s, mul: pow32(fnvPrime32, len(s))}
	for l := range f.add {
		f.add[l] = fnv1a(uint32(l), []byte(s)) - f.mul*uint32(l)
	}
	return f
}

// apply returns fnv(h, f.s).
func (f *fragment) apply(h uint32) uint32 { return f.mul*h + f.add[h&0xff] }

// pow32 returns x^n modulo 2^32, by repeated squaring.
func pow32(x uint32, n int) uint32 {
	r := uint32(1)
	for ; n > 0; n >>= 1 {
		if n&1 == 1 {
			r *= x
		}
		x *= x
	}
	return r
}

// hashTables holds every precomputed transform. It is built once, on first
// use, and never modified afterwards (about 145 KiB).
type hashTables struct {
	head, headV1, reg, podUID, container, resource, devices, devicesV1, allocResp, nilText, mapOpen *fragment

	// For the text " <decimal of c>" that follows every AllocResp byte c
	// but the first: byteMul[c] is p^len, and for an incoming low byte L,
	// byteAdd[c][L&63] is the additive term and byteNext[c][L] the low byte
	// afterwards. The low-byte chain is the only sequential dependency; a
	// separate 64 KiB byte table, addressed by row, keeps it to one L1 load
	// per AllocResp byte while byteAdd is looked up off the critical path.
	//
	// The additive term ignores L's top two bits. Every character of the
	// text (a space, digits) is below 0x40, so XOR with it never touches
	// bits 6 and 7, and adding 0x40*k to the state commutes with every step:
	// fnv(h + 0x40*k, text) == fnv(h, text) + 0x40*k*p^len. Hence
	// add(L + 0x40*k) == add(L). Rows of 64 terms keep the table's part that
	// an AllocResp touches small enough to share the L1 cache with byteNext.
	byteMul  [256]uint32
	byteNext [256][256]uint8
	byteAdd  [256][64]uint32
}

var hashTablesOnce = sync.OnceValue(buildHashTables)

func buildHashTables() *hashTables {
	t := &hashTables{
		head:      newFragment(gHead),
		headV1:    newFragment(gHeadV1),
		reg:       newFragment(gReg),
		podUID:    newFragment(gPodUID),
		container: newFragment(gContainer),
		resource:  newFragment(gResource),
		devices:   newFragment(gDevices),
		devicesV1: newFragment(gDevicesV1),
		allocResp: newFragment(gAllocResp),
		nilText:   newFragment(gNil),
		mapOpen:   newFragment("map["),
	}
	for c := 0; c < 256; c++ {
		f := newFragment(" " + strconv.Itoa(c))
		t.byteMul[c] = f.mul
		for l := 0; l < 256; l++ {
			if l < 64 {
				t.byteAdd[c][l] = f.add[l] // the rest repeat it (TestHashTables checks every L)
			}
			t.byteNext[c][l] = uint8(f.mul*uint32(l) + f.add[l])
		}
	}
	return t
}

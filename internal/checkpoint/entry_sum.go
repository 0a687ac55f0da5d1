package checkpoint

import (
	"encoding/binary"
	"math/bits"
	"sync/atomic"
)

// A piece of hashed text that never changes (an Entry's, a Registered pair's) maps, as the
// grammar's constant fragments do (see hashtables.go), an incoming state h to mul*h + add,
// where mul = p^len(text) and add depends only on the low byte of h. cachedSum remembers add
// for the last low byte the piece was hashed after: when what comes before it is what it was
// in the previous write (or only its low byte is), the piece costs one multiply instead of a
// pass over its text.
type cachedSum struct {
	mul  atomic.Uint32 // p^len(text), stored before last; 0 (no power of p) until then
	last atomic.Uint64 // sumKnown | low byte << 32 | add, or 0
}

const sumKnown = 1 << 40

// applied folds the piece's text into s from the memo, and reports whether the memo held s's
// low byte. When it did not, the caller hashes the text and calls remember.
func (c *cachedSum) applied(s *hasher) bool {
	v := c.last.Load()
	if v&sumKnown == 0 || uint8(v>>32) != uint8(s.h) {
		return false
	}
	s.h = c.mul.Load()*s.h + uint32(v)
	return true
}

// remember records that hashing the piece's text took the state from h0 to h. textLen, the
// text's length, is asked for the first time only.
func (c *cachedSum) remember(h0, h uint32, textLen func() int) {
	mul := c.mul.Load()
	if mul == 0 {
		mul = pow32(fnvPrime32, textLen())
		c.mul.Store(mul)
	}
	c.last.Store(sumKnown | uint64(uint8(h0))<<32 | uint64(h-mul*h0))
}

// entryTextLen returns the length of e's ENTRY text (what hasher.entry emits).
func entryTextLen(t *hashTables, e *PodDevicesEntry) int {
	n := len(t.podUID.s) + len(e.PodUID) + len(t.container.s) + len(e.ContainerName) +
		len(t.resource.s) + len(e.ResourceName) + len(t.devices.s) + len(t.allocResp.s) + 1
	if e.DeviceIDs == nil {
		n += len(t.nilText.s)
	} else {
		n += len(t.mapOpen.s) + 1 // "map[" ... "]"
		first := true
		for k, ids := range e.DeviceIDs {
			if !first {
				n++ // the space between pairs
			}
			first = false
			var tmp [20]byte
			n += len(appendInt(tmp[:0], k)) + 1 + strListTextLen(t, ids)
		}
	}
	if e.AllocResp == nil {
		n += len(t.nilText.s)
	} else {
		n += 2 + decimalDigits(e.AllocResp) // "[" "]" and the numbers
		if len(e.AllocResp) > 1 {
			n += len(e.AllocResp) - 1 // the spaces between them
		}
	}
	return n
}

// decimalDigits returns the total length of the decimal texts of b's bytes: one digit each,
// plus one for each byte of 10 or more and one more for each of 100 or more, counted eight
// bytes at a time.
func decimalDigits(b []byte) int {
	n := len(b)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		v := binary.LittleEndian.Uint64(b[i:])
		n += bits.OnesCount64(bytesAtLeast(v, 10)) + bits.OnesCount64(bytesAtLeast(v, 100))
	}
	for _, c := range b[i:] {
		n += int(byteDec[c].n) - 1
	}
	return n
}

// bytesAtLeast returns the high bit of each byte of v that is k or more, for k below 0x80,
// and no other bit. A byte below 0x80 plus 0x80-k reaches 0x80 exactly when it is k or more,
// with no carry into the next byte; a byte of 0x80 or more has the bit already.
func bytesAtLeast(v uint64, k byte) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	return ((v &^ highs) + ones*uint64(0x80-k) | v) & highs
}

// strListTextLen returns the length of the STRLIST text of l.
func strListTextLen(t *hashTables, l []string) int {
	if l == nil {
		return len(t.nilText.s)
	}
	n := 2
	for i, s := range l {
		if i > 0 {
			n++
		}
		n += len(s)
	}
	return n
}

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
//
// A large piece that stays while what comes before it changes (the registered devices of a
// large plugin, after entries that change at every admission) also gets, once it is hashed
// after a second low byte, a table of add for every low byte (sumTable), filled eight low
// bytes per pass over its text (fillGroup): a write hashes its text again only after a low
// byte whose group it has not been seen after, at most 32 times in its life, and otherwise
// costs one multiply.
//
// An Entry that keeps being hashed after new states (the entries before it change: an older
// pod left) gets, once a write can afford it (see passAllowance), its whole textSum: every
// later write then costs it one multiply, whatever comes before it.
//
// A piece read from a file comes with the states before and after its text (seen), which the
// reader records without working out mul: that costs a pass over the text, and is left to the
// first checksum that uses the piece.
type cachedSum struct {
	mul   atomic.Uint32 // p^len(text), stored before last; 0 (no power of p) until then
	last  atomic.Uint64 // sumKnown | low byte << 32 | add, or 0
	wide  atomic.Pointer[sumTable]
	whole atomic.Pointer[textSum]
	// seen is h0 | h << 32 from the reader's hash, valid once hasSeen is set.
	seen    atomic.Uint64
	hasSeen atomic.Bool
}

const sumKnown = 1 << 40

// wideSumBytes is the JSON size from which a Registered pair gets a sumTable (1 KiB): hashing
// that much text afresh costs tens of microseconds.
const wideSumBytes = 16 << 10

// sumTable holds a piece's add for each low byte it was hashed after. A slot is written
// before its bit is set, so a reader that sees the bit sees the slot.
type sumTable struct {
	known [4]atomic.Uint64 // bit l of the 256 says that add[l] is set
	add   [256]atomic.Uint32
}

func (t *sumTable) get(l uint8) (add uint32, ok bool) {
	if t.known[l>>6].Load()&(1<<(l&63)) == 0 {
		return 0, false
	}
	return t.add[l].Load(), true
}

func (t *sumTable) set(l uint8, add uint32) {
	t.add[l].Store(add)
	t.known[l>>6].Or(1 << (l & 63))
}

// applied folds the piece's text into s from the memo, and reports whether the memo held s's
// low byte. When it did not, the caller hashes the text and calls remember. textLen, the
// text's length, is asked for when states seen by a reader are turned into the memo.
func (c *cachedSum) applied(s *hasher, textLen func() int) bool {
	return c.apply(s, textLen) != sumMissed
}

// sumSource says where apply found a piece's part of the checksum.
type sumSource uint8

const (
	sumMissed sumSource = iota // nowhere: the caller hashes the text
	sumMemo                    // the memo of the last low byte, or the wide table
	sumWhole                   // the whole textSum, where the memo had missed
)

// apply is applied, saying where the part came from.
func (c *cachedSum) apply(s *hasher, textLen func() int) sumSource {
	if w := c.whole.Load(); w != nil {
		if v := c.last.Load(); v&sumKnown != 0 && uint8(v>>32) == uint8(s.h) {
			s.h = w.apply(s.h)
			return sumMemo
		}
		s.h = w.apply(s.h)
		return sumWhole
	}
	if c.last.Load()&sumKnown == 0 && c.hasSeen.Load() {
		seen := c.seen.Load()
		c.remember(uint32(seen), uint32(seen>>32), textLen, false)
	}
	add, ok := c.lookup(uint8(s.h))
	if !ok {
		return sumMissed
	}
	s.h = c.mul.Load()*s.h + add
	return sumMemo
}

// fillGroup hashes the piece's text, which feed writes into a lanes8, after the eight low
// bytes of l's group (l with its low three bits cleared, and the seven after it) at once, and
// records the add of each in the piece's wide table. It returns the add after l. A large piece
// that follows ever new states (a large plugin's registered devices after the entries, which
// change at every admission) so fills its table in at most 32 passes, instead of one low byte
// per pass.
func (c *cachedSum) fillGroup(l uint8, textLen func() int, feed func(*lanes8)) uint32 {
	mul := c.mul.Load()
	if mul == 0 {
		mul = pow32(fnvPrime32, textLen())
		c.mul.Store(mul)
	}
	base := uint32(l &^ 7)
	var h lanes8
	for j := range h {
		h[j] = base + uint32(j)
	}
	feed(&h)
	t := c.wide.Load()
	if t == nil {
		t = new(sumTable)
		if prev := c.last.Load(); prev&sumKnown != 0 {
			t.set(uint8(prev>>32), uint32(prev)) // the low byte of the memo stays known
		}
		if !c.wide.CompareAndSwap(nil, t) {
			t = c.wide.Load()
		}
	}
	for j, hj := range h {
		t.set(uint8(base)+uint8(j), hj-mul*(base+uint32(j)))
	}
	add, _ := t.get(l)
	c.last.Store(sumKnown | uint64(l)<<32 | uint64(add))
	return add
}

// hashedBefore reports whether the piece's part is known for some low byte: it was hashed
// before, after another state than now when apply just missed.
func (c *cachedSum) hashedBefore() bool { return c.last.Load()&sumKnown != 0 }

// wholeCostPasses is what building an Entry's textSum costs, in passes of the checksum over
// its text (BenchmarkTextSum: about 32 on the benchmark machine's entries).
const wholeCostPasses = 32

// wholeSpendFactor bounds what one checksum spends on textSums: that many times what it
// would have spent on passes without them.
const wholeSpendFactor = 8

// passAllowance decides, during one checksum, which pieces get their whole textSum: a
// piece's is built when wholeSpendFactor times the passes over text this checksum has made
// or been spared by textSums (counted in bytes of JSON) pays for it. So a checksum costs at
// most 1+wholeSpendFactor times what it cost without textSums, and a file whose entries all
// follow new states at every write (the oldest pod leaves at every admission) has them all
// within about wholeCostPasses/wholeSpendFactor writes, after which such a write costs a
// lookup per run of entries.
type passAllowance struct{ bytes int }

// spared records a pass over n bytes that a textSum saved.
func (a *passAllowance) spared(n int) { a.bytes += wholeSpendFactor * n }

// affords records that a piece of n bytes missed its memo and reports whether its textSum
// is to be built now, which it then pays for. Only a piece hashed before (eligible) gets
// one: most entries are hashed once, after the entries before them, and never again.
func (a *passAllowance) affords(n int, eligible bool) bool {
	a.bytes += wholeSpendFactor * n
	if !eligible || a.bytes < wholeCostPasses*n {
		return false
	}
	a.bytes -= wholeCostPasses * n
	return true
}

// lookup returns the piece's add after low byte l, if the memo holds it.
func (c *cachedSum) lookup(l uint8) (uint32, bool) {
	if v := c.last.Load(); v&sumKnown != 0 && uint8(v>>32) == l {
		return uint32(v), true
	}
	if t := c.wide.Load(); t != nil {
		return t.get(l)
	}
	return 0, false
}

// saw records that a reader's hashing of the piece's text took the state from h0 to h.
func (c *cachedSum) saw(h0, h uint32) {
	c.seen.Store(uint64(h0) | uint64(h)<<32)
	c.hasSeen.Store(true)
}

// remember records that hashing the piece's text took the state from h0 to h. textLen, the
// text's length, is asked for the first time only. With wide, a piece hashed after a second
// low byte gets a sumTable, which keeps this and every later one.
func (c *cachedSum) remember(h0, h uint32, textLen func() int, wide bool) {
	mul := c.mul.Load()
	if mul == 0 {
		mul = pow32(fnvPrime32, textLen())
		c.mul.Store(mul)
	}
	prev := c.last.Load()
	add := h - mul*h0
	c.last.Store(sumKnown | uint64(uint8(h0))<<32 | uint64(add))
	if !wide {
		return
	}
	t := c.wide.Load()
	if t == nil {
		if prev&sumKnown == 0 {
			return // hashed once: a table only pays for a piece hashed again
		}
		t = new(sumTable)
		t.set(uint8(prev>>32), uint32(prev))
		if !c.wide.CompareAndSwap(nil, t) {
			t = c.wide.Load()
		}
	}
	t.set(uint8(h0), add)
}

// entryText returns e's ENTRY text (what hasher.entry emits).
func entryText(e *PodDevicesEntry) []byte {
	s := newHasher(true)
	s.text = make([]byte, 0, entryTextLen(s.t, e))
	s.entry(e)
	return s.text
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

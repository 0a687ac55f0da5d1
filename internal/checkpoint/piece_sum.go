package checkpoint

import "sync/atomic"

// pieceSum is what hashing a piece of text that never changes (an Entry's, a Registered
// pair's) does to the checksum's state: h -> mul*h + add[h & mask], mask 0x7f for ASCII text,
// else 0xff. It remembers add for the low byte the piece was first hashed after (the memo);
// hashed after another one, an Entry gets its whole textSum and a Registered pair, whose text
// may be tens of MiB, fills a table eight low bytes per pass (lanes8).
type pieceSum struct {
	// meta is metaKnown | mask << 32 | mul, or 0 before the first use.
	meta atomic.Uint64
	// memo is metaKnown | low byte << 32 | add, or 0.
	memo  atomic.Uint64
	table atomic.Pointer[sumTable]
	whole atomic.Pointer[textSum]
}

const metaKnown = 1 << 40

// piece is a fixed text of the checksum's grammar: an Entry's ENTRY, a Registered pair's
// "resource:STRLIST".
type piece interface {
	sum() *pieceSum
	hashInto(s *hasher)  // emits the text into a hasher
	hashLanes(h *lanes8) // hashes the text into eight states
	wholeSum() *textSum  // the text's whole textSum, or nil where a table is filled instead
	textLen() int        // the text's length
	asciiText() bool     // whether every byte of the text is below 0x80
}

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

// applyPiece returns the state after p's text, hashed from h.
func applyPiece(h uint32, p piece) uint32 {
	c := p.sum()
	if w := c.whole.Load(); w != nil {
		return w.apply(h)
	}
	meta := c.meta.Load()
	if meta == 0 {
		mask := uint64(0xff)
		if p.asciiText() {
			mask = 0x7f
		}
		meta = metaKnown | mask<<32 | uint64(pow32(fnvPrime32, p.textLen()))
		c.meta.Store(meta)
	}
	mul, l := uint32(meta), uint8(h&uint32(meta>>32))
	memo := c.memo.Load()
	if memo&metaKnown != 0 && uint8(memo>>32) == l {
		return mul*h + uint32(memo)
	}
	t := c.table.Load()
	if t != nil {
		if add, ok := t.get(l); ok {
			return mul*h + add
		}
	}
	if memo&metaKnown == 0 {
		// Hashed for the first time: one pass, and its result kept. Most pieces are never
		// hashed after another state.
		s := newHasher(false)
		s.h = h
		p.hashInto(&s)
		c.memo.Store(metaKnown | uint64(l)<<32 | uint64(s.h-mul*h))
		return s.h
	}
	if w := p.wholeSum(); w != nil {
		c.whole.Store(w)
		return w.apply(h)
	}
	if t == nil {
		t = new(sumTable)
		t.set(uint8(memo>>32), uint32(memo))
		if !c.table.CompareAndSwap(nil, t) {
			t = c.table.Load()
		}
	}
	// Hashed again after another low byte: fill the table for l's group of eight.
	base := l &^ 7
	var lanes lanes8
	for j := range lanes {
		lanes[j] = uint32(base) + uint32(j)
	}
	p.hashLanes(&lanes)
	for j, hj := range lanes {
		t.set(base+uint8(j), hj-mul*(uint32(base)+uint32(j)))
	}
	add, _ := t.get(l)
	c.memo.Store(metaKnown | uint64(l)<<32 | uint64(add))
	return mul*h + add
}

// step returns the state after hashing the byte c from h; unstep undoes it.
func step(h uint32, c byte) uint32 { return (h ^ uint32(c)) * fnvPrime32 }

func unstep(h uint32, c byte) uint32 { return (h * fnvPrimeInverse) ^ uint32(c) }

// fnvPrimeInverse is the inverse of fnvPrime32 modulo 2^32: FNV-1a's multiply is undone by it.
var fnvPrimeInverse = func() uint32 {
	x := fnvPrime32 // correct to 3 bits for an odd number; each Newton step doubles that
	for range 5 {
		x *= 2 - fnvPrime32*x
	}
	return x
}()

// isASCII reports whether every byte of b is below 0x80.
func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// lanes8 is eight FNV-1a 32 states hashed through the same text side by side: one pass costs
// about what a pass of a single state does, as the states' multiplies overlap.
type lanes8 [8]uint32

// write hashes text into the eight states.
func (h *lanes8) write(text string) { lanesWrite(h, text) }

// lanesWrite hashes text into the eight states of h, kept in registers through the text.
func lanesWrite[T string | []byte](h *lanes8, text T) {
	const p = fnvPrime32
	h0, h1, h2, h3, h4, h5, h6, h7 := h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
	for i := 0; i < len(text); i++ {
		x := uint32(text[i])
		h0 = (h0 ^ x) * p
		h1 = (h1 ^ x) * p
		h2 = (h2 ^ x) * p
		h3 = (h3 ^ x) * p
		h4 = (h4 ^ x) * p
		h5 = (h5 ^ x) * p
		h6 = (h6 ^ x) * p
		h7 = (h7 ^ x) * p
	}
	h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7] = h0, h1, h2, h3, h4, h5, h6, h7
}

// writeList hashes the STRLIST text of l ("<nil>", or "[a b c]") into the eight states.
func (h *lanes8) writeList(l []string) {
	if l == nil {
		h.write(gNil)
		return
	}
	h.write("[")
	for i, x := range l {
		if i > 0 {
			h.write(" ")
		}
		h.write(x)
	}
	h.write("]")
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

// decimalDigits returns the total length of the decimal texts of b's bytes.
func decimalDigits(b []byte) int {
	n := 0
	for _, c := range b {
		n += int(byteDec[c].n)
	}
	return n
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

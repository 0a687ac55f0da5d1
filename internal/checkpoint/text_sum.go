package checkpoint

import "sync"

// An Entry's whole textSum: its text hashed after every possible state at once. When the
// text's bytes are all below 0x80, or all below 0x40 (the decimal dump of AllocResp), XOR
// with them never reaches the state's top bit, or its top two bits, and the terms repeat every
// 128 or every 64 low bytes. entrySum joins the dump's terms (64 states through the per-byte
// tables) and the rest's (128 or 256 states, eight side by side): about 32 passes' work.

// textSum is what a fixed text does to the FNV-1a 32 state: fnv(h, text) == mul*h +
// add[h&(len(add)-1)] for every h. len(add) is 64, 128 or 256. It is immutable once built.
type textSum struct {
	mul uint32
	add []uint32
}

// apply returns fnv(h, text).
func (t *textSum) apply(h uint32) uint32 { return t.mul*h + t.add[h&uint32(len(t.add)-1)] }

// then returns the textSum of t's text followed by u's.
func (t *textSum) then(u *textSum) *textSum {
	n := max(len(t.add), len(u.add))
	r := &textSum{mul: t.mul * u.mul, add: make([]uint32, n)}
	tm, um := uint32(len(t.add)-1), uint32(len(u.add)-1)
	// The low bits of the state after t depend only on the same low bits before it, so the
	// result repeats every n low bytes: computing n terms is enough.
	for l := range uint32(n) {
		a := t.add[l&tm]
		r.add[l] = a*u.mul + u.add[(l*t.mul+a)&um]
	}
	return r
}

// sumBuilder is a hasher's textSum in the making (hasher.sum): the text the hasher emits
// gathers in its text and goes through laneSum when the dump of an AllocResp comes, whose
// terms decimalSum makes; the two join.
type sumBuilder struct{ sum *textSum }

// join appends u.
func (b *sumBuilder) join(u *textSum) {
	if b.sum == nil {
		b.sum = u
	} else {
		b.sum = b.sum.then(u)
	}
}

// text joins the text s gathered, and empties it.
func (b *sumBuilder) text(s *hasher) {
	if len(s.text) > 0 {
		b.join(laneSum(s.text, lanesFor(s.text)))
		s.text = s.text[:0]
	}
}

// entrySum returns the textSum of e's ENTRY text (what hasher.entry emits).
func entrySum(e *PodDevicesEntry) *textSum {
	s := newHasher(true)
	s.sum = &sumBuilder{}
	s.entry(e)
	s.sum.text(&s)
	return s.sum.sum
}

// decimalSum returns the textSum of the text decimalBytes hashes for b: " <decimal of c>"
// for each byte c. Every character is below 0x40, so 64 states go through the per-byte
// tables, four side by side.
func (t *hashTables) decimalSum(b []byte) *textSum {
	mul := uint32(1)
	for _, c := range b {
		mul *= t.byteMul[c]
	}
	add := make([]uint32, 64)
	for g := uint32(0); g < 64; g += 4 {
		h0, h1, h2, h3 := g, g+1, g+2, g+3
		for _, c := range b {
			m, a := t.byteMul[c], &t.byteAdd[c]
			h0 = m*h0 + a[h0&63]
			h1 = m*h1 + a[h1&63]
			h2 = m*h2 + a[h2&63]
			h3 = m*h3 + a[h3&63]
		}
		r := add[g : g+4 : g+4]
		r[0], r[1], r[2], r[3] = h0-mul*g, h1-mul*(g+1), h2-mul*(g+2), h3-mul*(g+3)
	}
	return &textSum{mul: mul, add: add}
}

// lanesFor returns how many low bytes the terms of text depend on: 64 when every byte is
// below 0x40, 128 when below 0x80, else 256.
func lanesFor(text []byte) int {
	var or byte
	for _, c := range text {
		or |= c
	}
	switch {
	case or < 0x40:
		return 64
	case or < 0x80:
		return 128
	}
	return 256
}

// laneSum hashes text from the states 0 to lanes-1 (a multiple of 8) and returns the terms.
// Eight states go through the text together (lanes8), each on its own chain, so the
// multiplies overlap instead of waiting for one another.
func laneSum(text []byte, lanes int) *textSum {
	mul := pow32(fnvPrime32, len(text))
	add := make([]uint32, lanes)
	for g := 0; g < lanes; g += 8 {
		var h lanes8
		for j := range h {
			h[j] = uint32(g + j)
		}
		lanesWrite(&h, text)
		for j, hj := range h {
			add[g+j] = hj - mul*uint32(g+j)
		}
	}
	return &textSum{mul: mul, add: add}
}

// spaceSum is the textSum of the space between two entries.
var spaceSum = sync.OnceValue(func() *textSum { return laneSum([]byte{' '}, 64) })

package checkpoint

import (
	"hash/maphash"
	"slices"
	"sync"
)

// A piece of text hashed after every possible state at once.
//
// As hashtables.go explains, fnv(h, text) == p^len(text)*h + add[h & 0xff] for any text, so
// 256 terms describe what the text does to the checksum's chain from any state. When the
// text's bytes are all below 0x80 (ASCII), or all below 0x40 (digits, spaces and the like:
// the decimal dump of AllocResp), XOR with them never reaches the state's top bit, or its top
// two bits, and the terms repeat every 128 or every 64 low bytes. A piece whose text stays
// the same while what comes before it changes (an Entry once an entry before it leaves the
// file) then costs one multiply and one lookup per write, instead of a pass over its text.
//
// Building the terms costs a pass over the text for each low byte that matters (64, 128 or
// 256 passes, run side by side), so entrySum joins the terms of an entry's two parts: the
// decimal dump of AllocResp takes 64 passes through the per-byte tables, the rest of the text
// 128 (256 when it has bytes of 0x80 or more). On the benchmark's entries that is about 32
// passes' worth of work (BenchmarkTextSum).

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

// An entryRun is a run of consecutive entries in a file, from an entry that heads a run (one
// in runLength, chosen by its identity, see runHead) to the entry before the next head, and
// the textSum of their text with the spaces between them. The head keeps the run as it was
// last composed: while the same entries follow it, a checksum applies the run's textSum
// instead of one per entry, whose lookups, each waiting on the one before, cost a cache miss
// apiece in a large file. A run stays valid as entries come and go elsewhere: only a change
// inside it (an entry leaves it, or arrives in it) makes it be composed again, from its
// entries' own textSums.
type entryRun struct {
	entries []*Entry
	sum     *textSum
}

// runLength is the mean number of entries in a run.
const runLength = 32

// runSeed keys the choice of run heads, so that no set of pod UIDs makes runs long on
// purpose.
var runSeed = maphash.MakeSeed()

// runHead reports whether e heads a run: a choice fixed by its pod, container and resource,
// so that an entry keeps it for life, and read from a file or made anew alike.
func runHead(e *PodDevicesEntry) bool {
	var h maphash.Hash
	h.SetSeed(runSeed)
	h.WriteString(e.PodUID)
	h.WriteByte(0)
	h.WriteString(e.ContainerName)
	h.WriteByte(0)
	h.WriteString(e.ResourceName)
	return h.Sum64()%runLength == 0
}

// spaceSum is the textSum of the space between two entries.
var spaceSum = sync.OnceValue(func() *textSum { return laneSum([]byte{' '}, 64) })

// checksumRun folds entries[i] into s and, when it heads a run, the rest of its run, and
// returns the index of the next entry. A run that follows its head as last composed is
// applied whole; otherwise each entry goes through entry, which reports whether the entry has
// its whole textSum, and a run whose entries all have one is composed for the next write.
func checksumRun(s *hasher, entries []*Entry, i int, entry func(*Entry) bool) int {
	head := entries[i]
	if !head.heads || !fastPath(offWhole) {
		entry(head)
		return i + 1
	}
	if r := head.run.Load(); r != nil && len(r.entries) <= len(entries)-i && slices.Equal(r.entries, entries[i:i+len(r.entries)]) {
		s.h = r.sum.apply(s.h)
		return i + len(r.entries)
	}
	end := i + 1
	for end < len(entries) && !entries[end].heads {
		end++
	}
	whole := entry(head)
	for _, e := range entries[i+1 : end] {
		s.char(' ')
		whole = entry(e) && whole
	}
	if whole && end-i > 1 {
		sum := head.sum.whole.Load()
		space := spaceSum()
		for _, e := range entries[i+1 : end] {
			sum = sum.then(space).then(e.sum.whole.Load())
		}
		head.run.Store(&entryRun{entries: slices.Clone(entries[i:end]), sum: sum})
	}
	return end
}

// lanes8 is eight FNV-1a 32 states hashed through the same text side by side (see laneSum):
// one pass costs about what a pass of a single state does, as the states' multiplies overlap.
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

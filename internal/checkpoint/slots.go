package checkpoint

import (
	"bufio"
	"io"
	"os"
	"slices"
)

// The Store writes a Prepared checkpoint as a slotted file, so that a write changes few bytes
// (docs/checkpoint-internals.md#durable-store):
//
//	{"Data":{"PodDeviceEntries":[ {...}   ,{...}        ,{...}   <gap>],"RegisteredDevices":{...}},"Checksum":N         }
//
// Each slot holds a separator (a space for the first entry, a comma for the others), an entry's
// JSON and spaces. JSON ignores the spaces and the checksum is over the decoded values, so the
// file reads as the Data of its entries in slot order, and verifies. The checksum's parts are
// kept per block of blockSlots slots.

// blockSlots is how many slots a checksum block covers.
const blockSlots = 64

// sumWidth is the width the checksum is padded to: the digits of the largest uint32.
const sumWidth = 10

// slotLayout is the geometry of one generation of slotted files: where each slot lies, where
// the gap ends. It only grows (a slot is added in the gap), so every file written in this
// generation holds spaces where its own slots end.
type slotLayout struct {
	off  []int64 // slot i's first byte
	size []int64 // slot i's length
	end  int64   // the first byte after the last slot: the gap's start
	gap  int64   // the offset of the ']' closing the list: the gap's end
}

// tailOff is the offset of what follows the entry list: the registered devices and the
// checksum.
func (l *slotLayout) tailOff() int64 { return l.gap + 1 }

// slotImage is what a slotted file holds: its layout, the entry in each slot (nil when free),
// the first occupied slot (-1 if none), its registered pairs (reg, only until it is written:
// a large list is not kept alive for the comparison, their serials are) and its size.
type slotImage struct {
	lay     *slotLayout
	slots   []*Entry
	first   int
	reg     []*Registered
	serials []uint64
	regNil  bool
	size    int64
}

// at returns the entry in slot i, nil for a free slot or one added after the image.
func (im *slotImage) at(i int) *Entry {
	if i < len(im.slots) {
		return im.slots[i]
	}
	return nil
}

// slotModel is the Store's current slotted file: the layout, the entry of each slot and the
// checksum blocks.
type slotModel struct {
	lay   *slotLayout
	slots []*Entry
	count int // occupied slots
	// seen[i] is the write (epoch) that last found slots[i]'s entry in its Prepared.
	seen  []uint32
	epoch uint32
	// blocks hold the checksum's parts; stale is the first block whose state before it is
	// not known.
	blocks []sumBlock
	stale  int
	after  uint32 // the state after the last block, valid when no block is stale
}

// sumBlock is one block of blockSlots slots as part of the checksum: the state before it,
// and what its text does to the state, as a whole textSum once all its entries have one, or
// else per low byte seen (mul*h + table[h&0xff]).
type sumBlock struct {
	before uint32 // valid below slotModel.stale
	whole  *textSum
	mul    uint32 // p^len of the block's text, valid with table
	table  *sumTable
}

// update makes the model hold p's entries, each staying in its slot, and returns the image
// to write and the checksum's state after its entry list. reg is p's registered pairs, sorted.
func (m *slotModel) update(p *Prepared, reg []*Registered) (*slotImage, uint32) {
	arrivals := m.sort(p.Entries)
	if m.lay == nil || !m.place(arrivals) {
		m.relayout(p.Entries)
	}
	im := &slotImage{lay: m.lay, slots: slices.Clone(m.slots), first: -1, reg: reg, regNil: p.Registered == nil}
	for _, r := range reg {
		im.serials = append(im.serials, r.serial)
	}
	if m.count > 0 {
		im.first = slices.IndexFunc(m.slots, func(e *Entry) bool { return e != nil })
	}
	im.size = m.lay.tailOff() + tailLen(im.regNil, reg)
	return im, m.checksum()
}

// sort marks the entries of the model that are in entries, frees the slots of those that are
// not, and returns the entries that have no slot yet.
func (m *slotModel) sort(entries []*Entry) (arrivals []*Entry) {
	if m.epoch++; m.epoch == 0 {
		clear(m.seen)
		m.epoch = 1
	}
	for _, e := range entries {
		i := int(e.slot.Load()) - 1
		if i >= 0 && i < len(m.slots) && m.slots[i] == e && m.seen[i] != m.epoch {
			m.seen[i] = m.epoch
			continue
		}
		arrivals = append(arrivals, e)
	}
	for i, e := range m.slots {
		if e != nil && m.seen[i] != m.epoch {
			m.slots[i] = nil
			m.count--
			m.touch(i)
		}
	}
	return arrivals
}

// place puts each arrival in the first free slot it fits, or a new slot in the gap. It
// reports false when the gap ran out: the caller lays the file out anew.
func (m *slotModel) place(arrivals []*Entry) bool {
	free := 0 // no free slot before it
	for _, e := range arrivals {
		need := int64(len(e.encoded().json)) + 1
		i := free
		for ; i < len(m.slots); i++ {
			if m.slots[i] == nil && m.lay.size[i] >= need {
				break
			}
		}
		if i == len(m.slots) {
			size := need + slotSlack(need)
			if m.lay.end+size > m.lay.gap {
				return false
			}
			m.lay.off = append(m.lay.off, m.lay.end)
			m.lay.size = append(m.lay.size, size)
			m.lay.end += size
			m.slots = append(m.slots, nil)
			m.seen = append(m.seen, 0)
		} else if i == free {
			free++
		}
		m.slots[i] = e
		m.seen[i] = m.epoch
		m.count++
		e.slot.Store(int64(i) + 1)
		m.touch(i)
	}
	return true
}

// slotSlack is the room a slot of n bytes gets beyond its entry, so that a slightly larger
// entry fits it later.
func slotSlack(n int64) int64 { return 8 + n/16 }

// relayout lays the file out anew with entries in their order.
func (m *slotModel) relayout(entries []*Entry) {
	lay := &slotLayout{end: int64(len(jsonFileHead)) + 1}
	m.slots, m.seen, m.count = make([]*Entry, len(entries)), make([]uint32, len(entries)), len(entries)
	for i, e := range entries {
		need := int64(len(e.encoded().json)) + 1
		size := need + slotSlack(need)
		lay.off = append(lay.off, lay.end)
		lay.size = append(lay.size, size)
		lay.end += size
		m.slots[i], m.seen[i] = e, m.epoch
		e.slot.Store(int64(i) + 1)
	}
	lay.gap = lay.end + max(4<<10, (lay.end-int64(len(jsonFileHead)))/4)
	m.lay, m.blocks, m.stale = lay, nil, 0
}

// touch records that slot i changed: its block's part of the checksum is made again.
func (m *slotModel) touch(i int) {
	b := i / blockSlots
	if b < len(m.blocks) {
		m.blocks[b].table, m.blocks[b].whole = nil, nil
	}
	m.stale = min(m.stale, b)
}

// checksum returns the checksum's state after the entry list, from the blocks from the first
// stale one on.
func (m *slotModel) checksum() uint32 {
	n, known := (len(m.slots)+blockSlots-1)/blockSlots, len(m.blocks)
	for len(m.blocks) < n {
		m.blocks = append(m.blocks, sumBlock{})
	}
	if m.stale < n || n == 0 {
		h := step(hashTablesOnce().head.apply(fnvOffset32), '[')
		switch {
		case m.stale >= known && known > 0:
			h = m.after // the first new block follows the last one known
		case m.stale > 0:
			h = m.blocks[m.stale].before
		}
		for b := m.stale; b < n; b++ {
			m.blocks[b].before = h
			h = m.applyBlock(b, h)
		}
		m.after = h
	}
	m.stale = n
	h := m.after
	if m.count > 0 {
		h = unstep(h, ' ') // no space after the last entry
	}
	return step(h, ']')
}

// applyBlock returns the state after block b's entries, each followed by a space, from h.
func (m *slotModel) applyBlock(b int, h uint32) uint32 {
	blk := &m.blocks[b]
	if blk.whole != nil {
		return blk.whole.apply(h)
	}
	if blk.table != nil {
		if add, ok := blk.table.get(uint8(h)); ok {
			return blk.mul*h + add
		}
	}
	slots := m.slots[b*blockSlots : min(len(m.slots), (b+1)*blockSlots)]
	if blk.table != nil && m.composeBlock(blk, slots) {
		return blk.whole.apply(h) // the block missed twice: its entries' textSums are composed
	}
	h0, mul := h, uint32(1)
	for _, e := range slots {
		if e != nil {
			h = step(applyPiece(h, e), ' ')
			mul *= uint32(e.hash.meta.Load()) * fnvPrime32
		}
	}
	if blk.table == nil {
		blk.table, blk.mul = new(sumTable), mul
	}
	blk.table.set(uint8(h0), h-mul*h0)
	return h
}

// composeBlock gives blk the textSum of its slots' entries, each followed by a space, if all
// of them have their whole textSum, and reports whether it did.
func (m *slotModel) composeBlock(blk *sumBlock, slots []*Entry) bool {
	var w *textSum
	for _, e := range slots {
		if e == nil {
			continue
		}
		ew := e.hash.whole.Load()
		if ew == nil {
			return false
		}
		if w == nil {
			w = ew.then(spaceSum())
		} else {
			w = w.then(ew).then(spaceSum())
		}
	}
	if w == nil {
		w = &textSum{mul: 1, add: make([]uint32, 64)}
	}
	blk.whole, blk.table = w, nil
	return true
}

// writeImage writes the whole slotted file of im to f from its start, the checksum's digits
// left as spaces (see writeSum).
func writeImage(f *os.File, im *slotImage) error {
	return buffered(&countingWriter{w: f, f: f}, func(bw *bufio.Writer) {
		_, _ = bw.Write(jsonFileHead)
		_ = bw.WriteByte('[')
		var buf []byte
		for i := range im.lay.off {
			buf = im.slotBytes(buf[:0], i)
			_, _ = bw.Write(buf)
		}
		_, _ = bw.Write(spaces(buf[:0], im.lay.gap-im.lay.end))
		_ = bw.WriteByte(']')
		im.writeTail(bw)
	})
}

// buffered runs write with a pooled buffer (writeBuffers) in front of w and flushes it.
func buffered(w io.Writer, write func(*bufio.Writer)) error {
	bw := writeBuffers.Get().(*bufio.Writer)
	bw.Reset(w)
	write(bw)
	err := bw.Flush()
	bw.Reset(nil) // let go of the file
	writeBuffers.Put(bw)
	return err
}

// slotBytes appends the bytes of slot i.
func (im *slotImage) slotBytes(buf []byte, i int) []byte {
	n := len(buf)
	if e := im.at(i); e != nil {
		sep := byte(',')
		if i == im.first {
			sep = ' '
		}
		buf = append(append(buf, sep), e.encoded().json...)
	}
	return spaces(buf, im.lay.size[i]-int64(len(buf)-n))
}

// writeTail writes what follows the entry list: the registered devices and the checksum,
// its digits left as spaces.
func (im *slotImage) writeTail(bw *bufio.Writer) {
	_, _ = bw.Write(jsonRegistered)
	if im.regNil {
		_, _ = bw.WriteString("null")
	} else {
		_ = bw.WriteByte('{')
		for i, r := range im.reg {
			if i > 0 {
				_ = bw.WriteByte(',')
			}
			_, _ = bw.Write(r.encoded().json)
		}
		_ = bw.WriteByte('}')
	}
	_, _ = bw.WriteString(`},"Checksum":          }`) // sumWidth spaces
}

// writeSum writes the checksum's digits into the file of im.
func writeSum(f *os.File, im *slotImage, sum uint32) error {
	digits := appendInt(nil, int64(sum))
	_, err := f.WriteAt(spaces(digits, sumWidth-int64(len(digits))), im.size-1-sumWidth)
	return err
}

// spaces appends n spaces.
func spaces(buf []byte, n int64) []byte {
	for range n {
		buf = append(buf, ' ')
	}
	return buf
}

// tailLen is the length of a slotted file's tail (see slotImage.tail).
func tailLen(regNil bool, reg []*Registered) int64 {
	n := len(jsonRegistered) + len("null}") + len(`,"Checksum":}`) + sumWidth
	if !regNil {
		n += len("{}") - len("null") + max(0, len(reg)-1)
		for _, r := range reg {
			n += len(r.encoded().json)
		}
	}
	return int64(n)
}

// patchImage turns f, which holds prev (of the same layout), into next, the checksum's digits
// left as they are (see writeSum): only the slots that differ are written, a run of changed
// slots in one write, and the registered devices if they changed.
func patchImage(f *os.File, prev, next *slotImage) error {
	var buf []byte
	start := -1
	flush := func() error {
		if start < 0 {
			return nil
		}
		_, err := f.WriteAt(buf, next.lay.off[start])
		buf, start = buf[:0], -1
		return err
	}
	for i := range next.lay.off {
		if prev.at(i) == next.at(i) && (i == prev.first) == (i == next.first) {
			if err := flush(); err != nil {
				return err
			}
			continue
		}
		if start < 0 {
			start = i
		}
		buf = next.slotBytes(buf, i)
	}
	if err := flush(); err != nil {
		return err
	}
	// A pair not made by NewRegistered has serial 0 and is always written.
	if prev.regNil == next.regNil && slices.Equal(prev.serials, next.serials) && !slices.Contains(next.serials, 0) {
		return nil
	}
	off := next.lay.tailOff()
	if err := buffered(&countingWriter{w: io.NewOffsetWriter(f, off), f: f, base: off}, next.writeTail); err != nil {
		return err
	}
	if next.size < prev.size {
		return f.Truncate(next.size)
	}
	return nil
}

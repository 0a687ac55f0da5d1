package checkpoint

// pipelineBytes is the file size from which parseV2Fast hashes the entries on
// a second goroutine while it parses the rest: for a large checkpoint the
// checksum then costs little more than the parse.
const pipelineBytes = 64 << 10

// entryBatch is how many parsed entries the parser hands to the hashing
// goroutine at a time.
const entryBatch = 32

// parseV2FastSummed is parseV2FastWith(b, nil) that also computes the
// checksum of the result: a goroutine hashes the entries in batches as the
// parser completes them, and the RegisteredDevices once the parse is done. It
// is joined before returning. The result's sum is Checksum(&f.Data): when the
// hashed entries turn out not to be the final list, the checksum is computed
// again from the data.
//
// With keep, the result also holds the entries as Entries (f.entries, one per
// entry of the list, sharing its lists and bytes) that keep the states the
// checksum went through before and after them, and their text in b, for the
// first write to use (see cachedSum and Entry.encoded): the Entries keep b.
func parseV2FastSummed(b []byte, keep bool) (*fileV2, bool) {
	batches := make(chan []*Entry, 4)
	type result struct {
		s       hasher
		entries int
	}
	hashed := make(chan result, 1)
	go func() {
		s := newHasher(false)
		s.frag(s.t.head)
		n := 0
		for batch := range batches {
			for _, e := range batch {
				if n == 0 {
					s.char('[')
				} else {
					s.char(' ')
				}
				h0 := s.h
				s.entry(&e.PodDevicesEntry)
				if keep {
					e.hash.saw(h0, s.h, e)
				}
				n++
			}
		}
		hashed <- result{s, n}
	}()
	var (
		kept []*Entry
		// Entries that are not kept come from one allocation per batch.
		slab []Entry
	)
	batch := make([]*Entry, 0, entryBatch)
	f, ok := parseV2FastWith(b, func(pe *PodDevicesEntry, text []byte) {
		var e *Entry
		if keep {
			e = NewEntry(*pe)
			e.read = text
			kept = append(kept, e)
		} else {
			if len(batch) == 0 {
				slab = make([]Entry, entryBatch)
			}
			e = &slab[len(batch)]
			e.PodDevicesEntry = *pe
		}
		batch = append(batch, e)
		if len(batch) == entryBatch {
			batches <- batch
			batch = make([]*Entry, 0, entryBatch)
		}
	})
	if len(batch) > 0 {
		batches <- batch
	}
	close(batches)
	r := <-hashed
	if !ok {
		return nil, false
	}
	d := &f.Data
	if r.entries != len(d.PodDeviceEntries) || (r.entries == 0 && d.PodDeviceEntries == nil) {
		// Not one list parsed once, in order: hash the data as it is.
		f.sum, f.summed = Checksum(d), true
		return f, true
	}
	if keep {
		f.entries = kept
	}
	s := r.s
	if r.entries == 0 {
		s.char('[')
	}
	s.char(']')
	s.frag(s.t.reg)
	s.regMap(d.RegisteredDevices)
	s.char('}')
	f.sum, f.summed = s.h, true
	return f, true
}

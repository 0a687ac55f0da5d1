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
func parseV2FastSummed(b []byte) (*fileV2, bool) {
	batches := make(chan []PodDevicesEntry, 4)
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
			for i := range batch {
				if n == 0 {
					s.char('[')
				} else {
					s.char(' ')
				}
				s.entry(&batch[i])
				n++
			}
		}
		hashed <- result{s, n}
	}()
	batch := make([]PodDevicesEntry, 0, entryBatch)
	f, ok := parseV2FastWith(b, func(e *PodDevicesEntry) {
		batch = append(batch, *e)
		if len(batch) == entryBatch {
			batches <- batch
			batch = make([]PodDevicesEntry, 0, entryBatch)
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

package state

import "slices"

// radixCutoff is the size below which sortIDs compares strings instead of distributing them.
const radixCutoff = 64

// maxRadixLevels bounds the nested distributions of one sort, and so its stack and its passes
// over the IDs, whatever the IDs: deeper buckets are sorted by comparison.
const maxRadixLevels = 16

// sortIDs sorts device IDs in ascending byte order, as slices.Sort does, by distributing them
// on one byte at a time (most significant first), after the prefix they all share: device
// IDs share long prefixes and differ in a few bytes, which comparisons would read again and
// again. It allocates scratch space of len(ids) strings and bucket numbers.
func sortIDs(ids []string) {
	if len(ids) <= radixCutoff {
		slices.Sort(ids)
		return
	}
	r := radixSorter{scratch: make([]string, len(ids)), buckets: make([]uint16, len(ids))}
	r.sort(ids, 0, commonPrefixLen(ids), 0)
}

// commonPrefixLen returns the length of the longest prefix of every ID.
func commonPrefixLen(ids []string) int {
	first := ids[0]
	n := len(first)
	for _, id := range ids[1:] {
		i := 0
		for i < n && i < len(id) && id[i] == first[i] {
			i++
		}
		n = i
	}
	return n
}

// radixSorter holds the scratch space of one sortIDs.
type radixSorter struct {
	scratch []string
	buckets []uint16 // each ID's bucket at the current depth, by position
}

// sort sorts ids, which sit at offset off of the sort's input and whose first depth bytes
// are all equal; levels is the number of distributions around this one.
func (r *radixSorter) sort(ids []string, off, depth, levels int) {
	for len(ids) > radixCutoff && levels < maxRadixLevels {
		// Bucket 0 holds the IDs that end at depth; bucket b+1 those with byte b there.
		buckets := r.buckets[off : off+len(ids)]
		var count [257]int
		for i, id := range ids {
			b := uint16(0)
			if depth < len(id) {
				b = uint16(id[depth]) + 1
			}
			buckets[i] = b
			count[b]++
		}
		if count[buckets[0]] == len(ids) {
			if buckets[0] == 0 {
				return // all equal
			}
			depth++ // a byte every ID shares: look at the next one
			continue
		}
		var start [257]int
		for b := 1; b < len(start); b++ {
			start[b] = start[b-1] + count[b-1]
		}
		next := start
		scratch := r.scratch[off : off+len(ids)]
		for i, id := range ids {
			scratch[next[buckets[i]]] = id
			next[buckets[i]]++
		}
		copy(ids, scratch)
		// Bucket 0 is sorted (its IDs are equal); sort every other bucket on the next byte.
		for b := 1; b < len(count); b++ {
			if count[b] > 1 {
				lo, hi := start[b], start[b]+count[b]
				r.sort(ids[lo:hi], off+lo, depth+1, levels+1)
			}
		}
		return
	}
	slices.Sort(ids)
}

package checkpoint

// NewRegisteredFrom is NewRegistered(resource, ids) for a list made from prev's (the same
// resource's pair in an earlier checkpoint) by adding and removing a few IDs, as a health
// change does: when prev's text has been computed, the new pair's text is spliced from it,
// the runs of IDs both lists hold copied as they are, instead of encoded afresh. The text is
// the same either way; only its cost differs, and it is least when both lists are sorted.
// prev may be nil.
func NewRegisteredFrom(resource string, ids []string, prev *Registered) *Registered {
	r := NewRegistered(resource, ids)
	if prev != nil && fastPath(offSplice) && prev.Resource == resource && prev.text.Load() != nil {
		r.from.Store(prev)
	}
	return r
}

// spliceRegistered returns r's text made from prev's, or nil when prev's text is not the plain
// one (an ID in it was escaped or not valid UTF-8) or either list is nil. Each ID of r is
// either copied from prev's text, where it is the ID at the same place of a run both lists
// share, or encoded. Equal IDs are found in order: a list is walked with prev's, and an ID of
// prev that sorts before the next ID of r is skipped as removed.
func spliceRegistered(r, prev *Registered) *cachedText {
	pt := prev.text.Load()
	if pt == nil || pt.bad || r.IDs == nil || prev.IDs == nil {
		return nil
	}
	var w jsonWriter
	head := append(w.str(nil, r.Resource), ':', '[')
	// In the plain text, ID k of prev starts at at(k) = len(head) + the sum over the IDs
	// before it of their length plus two quotes and a comma; any escape makes it longer.
	plain := len(head) + 1
	for _, id := range prev.IDs {
		plain += len(id) + 3
	}
	if len(prev.IDs) > 0 {
		plain--
	}
	if len(pt.json) != plain || string(pt.json[:len(head)]) != string(head) {
		return nil
	}
	old := pt.json
	buf := make([]byte, 0, len(old)+len(old)/16+64)
	buf = append(buf, head...)
	i, at := 0, len(head) // prev's next ID and where it starts
	run := -1             // where the run of prev's text being copied starts, if any
	flush := func() {
		if run >= 0 {
			buf = append(buf, old[run:at-1]...) // up to the comma after the run's last ID
			run = -1
		}
	}
	for j, id := range r.IDs {
		for i < len(prev.IDs) && prev.IDs[i] != id && prev.IDs[i] < id {
			flush()
			at += len(prev.IDs[i]) + 3
			i++
		}
		if i < len(prev.IDs) && prev.IDs[i] == id {
			if run < 0 {
				if j > 0 {
					buf = append(buf, ',')
				}
				run = at
			}
			at += len(id) + 3
			i++
			continue
		}
		flush()
		if j > 0 {
			buf = append(buf, ',')
		}
		buf = w.str(buf, id)
	}
	flush()
	buf = append(buf, ']')
	return &cachedText{json: buf, badUTF8: w.badString, bad: w.badUTF8}
}

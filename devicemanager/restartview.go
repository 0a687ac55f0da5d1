package devicemanager

import (
	"slices"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// restartView is the part of a checkpoint that a restart reads back: the assignments and the
// names of the registered resources. The registered device lists are written, as the kubelet
// writes them, but not read: a restarted manager waits for each plugin's own list.
//
// Two checkpoints with the same view restore the same state, so a write whose view equals
// that of the last write made durable (file and directory synced) needs no directory sync
// of its own: if a crash undoes its rename, the file it leaves in place restores the same.
type restartView struct {
	valid bool
	// entries in file order; an Entry never changes, so its pointer identifies it.
	entries   []*checkpoint.Entry
	resources []string // sorted
}

// restartViewOf is p's restart view.
func restartViewOf(p *checkpoint.Prepared) restartView {
	v := restartView{valid: true, entries: p.Entries, resources: make([]string, 0, len(p.Registered))}
	for _, r := range p.Registered {
		v.resources = append(v.resources, r.Resource)
	}
	slices.Sort(v.resources)
	return v
}

// equal reports whether both views are valid and restore the same state.
func (v restartView) equal(o restartView) bool {
	return v.valid && o.valid && slices.Equal(v.entries, o.entries) && slices.Equal(v.resources, o.resources)
}

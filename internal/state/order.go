package state

import (
	"slices"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// entryOrder is every checkpoint entry of the state, in the order of the checkpoint file: the
// order the assignments were recorded in, those restored from a file first, in the file's
// order. A new assignment goes last and a released one leaves its place, so that a write
// rewrites the file only from the first entry that changed (see checkpoint.Store): on a node
// where short-lived pods come and go beside long-running ones, that is the file's tail,
// whatever the pods' UIDs. It is kept up to date entry by entry, so a snapshot costs a copy
// of the list.
type entryOrder []*checkpoint.Entry

// add appends e.
func (o *entryOrder) add(e *checkpoint.Entry) { *o = append(*o, e) }

// remove drops e, if it is there. It looks from the end, where entries come and go most.
func (o *entryOrder) remove(e *checkpoint.Entry) {
	for i := len(*o) - 1; i >= 0; i-- {
		if (*o)[i] == e {
			*o = slices.Delete(*o, i, i+1)
			return
		}
	}
}

// removeAll drops every entry in gone: a few one by one, more in one pass over the order.
func (o *entryOrder) removeAll(gone map[*checkpoint.Entry]bool) {
	if len(gone) <= 4 {
		for e := range gone {
			o.remove(e)
		}
		return
	}
	*o = slices.DeleteFunc(*o, func(e *checkpoint.Entry) bool { return gone[e] })
}

package state

import (
	"slices"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// entryOrder is every checkpoint entry of the state, in the order of the checkpoint file: the
// order the assignments were recorded in, those restored from a file first, in the file's
// order. A new assignment goes last and a released one leaves its place. The Store's
// slotted write keeps each entry in its slot whatever this order (see checkpoint.Store), so
// the order only matters to EncodePrepared and to a file laid out anew. It is kept up to
// date entry by entry, so a snapshot costs a copy of the list.
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

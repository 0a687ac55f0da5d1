package state

import (
	"cmp"
	"slices"

	"github.com/kdm-project/kdm/checkpoint"
)

// entryOrder is every checkpoint entry of the state, sorted by pod UID, container and
// resource: the order of the checkpoint file. It is kept up to date entry by entry, so a
// snapshot costs a copy of the list instead of a sort of every pod.
type entryOrder []*checkpoint.Entry

func compareEntries(a, b *checkpoint.Entry) int {
	if c := cmp.Compare(a.PodUID, b.PodUID); c != 0 {
		return c
	}
	if c := cmp.Compare(a.ContainerName, b.ContainerName); c != 0 {
		return c
	}
	return cmp.Compare(a.ResourceName, b.ResourceName)
}

// insert adds e, replacing the entry of the same container and resource if there is one.
func (o *entryOrder) insert(e *checkpoint.Entry) {
	i, found := slices.BinarySearchFunc(*o, e, compareEntries)
	if found {
		(*o)[i] = e
		return
	}
	*o = slices.Insert(*o, i, e)
}

// remove drops e, if it is there.
func (o *entryOrder) remove(e *checkpoint.Entry) {
	if i, found := slices.BinarySearchFunc(*o, e, compareEntries); found && (*o)[i] == e {
		*o = slices.Delete(*o, i, i+1)
	}
}

// rebuild sorts the entries of every recorded allocation afresh.
func (o *entryOrder) rebuild(p podDevices) {
	out := (*o)[:0]
	for _, containers := range p {
		for _, resources := range containers {
			for _, a := range resources {
				if a.entry != nil {
					out = append(out, a.entry)
				}
			}
		}
	}
	slices.SortFunc(out, compareEntries)
	clear(out[len(out):cap(out)])
	*o = out
}

package state

import (
	"slices"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// Disagreement is one container's resource for which an owner's record of the assignments
// (the second copy an embedder keeps, one entry per container and resource) and a checkpoint
// that decodes say different things: the checkpoint names other devices for it, or none.
type Disagreement struct {
	PodUID, ContainerName, ResourceName string
	// Recorded are the devices the record names, sorted.
	Recorded []string
	// Checkpointed are the devices the checkpoint names for the same container and resource,
	// sorted; nil when it names none.
	Checkpointed []string
	// HeldByOthers are the pods to which the checkpoint gives some of the recorded devices,
	// sorted; nil when none. Those devices are contested after a restore that keeps them.
	HeldByOthers []string
}

// CompareRecords compares the entries of a checkpoint that decodes with an owner's records of
// the same assignments, and returns the disagreements, in the records' order, and the entries
// a restore that keeps every recorded device takes: the checkpoint's, where a record's entry
// replaces the checkpoint's for the same container and resource and is added where the
// checkpoint has none. A recorded device that the checkpoint gives to another pod thus has two
// claimants after that restore (Contest), and goes to no third pod.
//
// The record wins for its own container because an owner writes it after the checkpoint write
// of the same allocation and a running container's devices never change: a checkpoint that
// says otherwise is older than the record, or not the owner's. Entries of the checkpoint that
// no record names are kept as they are. Without a disagreement, keep is the checkpoint's
// entries themselves. Neither input is modified.
func CompareRecords(cp, records []checkpoint.PodDevicesEntry) (keep []checkpoint.PodDevicesEntry, found []Disagreement) {
	type key struct{ pod, container, res string }
	at := make(map[key]int, len(cp)) // the last entry wins, as in a restore
	holders := map[string]map[string]sets.Set[string]{}
	for i := range cp {
		e := &cp[i]
		at[key{e.PodUID, e.ContainerName, e.ResourceName}] = i
		for _, id := range deviceSet(e.DeviceIDs).UnsortedList() {
			if holders[e.ResourceName] == nil {
				holders[e.ResourceName] = map[string]sets.Set[string]{}
			}
			if holders[e.ResourceName][id] == nil {
				holders[e.ResourceName][id] = sets.New[string]()
			}
			holders[e.ResourceName][id].Insert(e.PodUID)
		}
	}
	replace := map[int]int{} // checkpoint index → record index
	var added []int
	for j := range records {
		r := &records[j]
		recorded := sets.List(deviceSet(r.DeviceIDs))
		d := Disagreement{PodUID: r.PodUID, ContainerName: r.ContainerName, ResourceName: r.ResourceName, Recorded: recorded}
		others := sets.New[string]()
		for _, id := range recorded {
			others = others.Union(holders[r.ResourceName][id])
		}
		others.Delete(r.PodUID)
		if others.Len() > 0 {
			d.HeldByOthers = sets.List(others)
		}
		i, ok := at[key{r.PodUID, r.ContainerName, r.ResourceName}]
		if ok {
			d.Checkpointed = sets.List(deviceSet(cp[i].DeviceIDs))
		}
		if ok && slices.Equal(d.Checkpointed, recorded) {
			continue // another pod named beside it is the checkpoint's own contest, not a disagreement
		}
		found = append(found, d)
		if ok {
			replace[i] = j
		} else {
			added = append(added, j)
		}
	}
	if len(replace) == 0 && len(added) == 0 {
		return cp, found
	}
	keep = make([]checkpoint.PodDevicesEntry, 0, len(cp)+len(added))
	for i := range cp {
		if j, ok := replace[i]; ok {
			keep = append(keep, records[j])
			continue
		}
		keep = append(keep, cp[i])
	}
	for _, j := range added {
		keep = append(keep, records[j])
	}
	return keep, found
}

// deviceSet is the devices of an entry, each once whatever NUMA nodes name it.
func deviceSet(devs checkpoint.DevicesPerNUMA) sets.Set[string] {
	out := sets.New[string]()
	for _, ids := range devs {
		out.Insert(ids...)
	}
	return out
}

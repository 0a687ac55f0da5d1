package state

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// Prepared returns the checkpoint content of the current state: every assignment, in the order
// they were recorded (see entryOrder), and the healthy devices of every resource with a device
// list, sorted. Entries whose response could not be marshalled are left out, as the kubelet
// does. Its entries keep their encoding between writes (checkpoint.Entry), and Data gives the
// same content as checkpoint.Data. Its cost is a copy of the list of entries: the entries,
// their order and the sorted device lists are kept from one snapshot to the next. The lists
// and entries it shares with the state are never modified; only the state changes.
func (s *State) Prepared() *checkpoint.Prepared {
	reg := make([]*checkpoint.Registered, 0, len(s.resources))
	for name, r := range s.resources {
		if r.hasSets() {
			reg = append(reg, r.registered.get(name, r.healthy))
		}
	}
	var entries []*checkpoint.Entry
	if len(s.order) > 0 {
		entries = slices.Clone(s.order)
	}
	return &checkpoint.Prepared{Entries: entries, Registered: reg}
}

// ContainerEntries returns the container's checkpoint entries, one per resource it holds,
// sorted by resource: the same entries Prepared holds for it.
func (s *State) ContainerEntries(podUID, container string) []checkpoint.PodDevicesEntry {
	c, ok := s.pods[podUID][container]
	if !ok {
		return nil
	}
	return s.entries(podDevices{podUID: {container: c}})
}

func (s *State) entries(p podDevices) []checkpoint.PodDevicesEntry {
	var out []checkpoint.PodDevicesEntry
	for _, podUID := range SortedKeys(p) {
		for _, container := range SortedKeys(p[podUID]) {
			for _, res := range SortedKeys(p[podUID][container]) {
				a := p[podUID][container][res]
				if a.raw == nil {
					continue
				}
				out = append(out, checkpoint.PodDevicesEntry{
					PodUID: podUID, ContainerName: container, ResourceName: res,
					DeviceIDs: a.Devices, AllocResp: a.raw,
				})
			}
		}
	}
	return out
}

// Restore replaces every assignment with data's entries: a checkpoint's, or the owner's own
// record of them (data with no registered devices). Every resource data registers becomes
// known with no device, its plugin away since now (AddRestored). With
// Options.KnowAssignedResources, so does a resource that only assignments name (its plugin was
// gone past the grace period when the checkpoint was written): its pods then wait for the
// plugin like the others instead of being refused as unregistered. Reservations and the
// device sets of resources already known are untouched. Entries of several pods naming one
// device are all restored, the device becoming contested (Contests). It returns the entries
// skipped because their AllocResp is not a valid ContainerAllocateResponse.
//
// read, when not nil, are the entries as checkpoint.Store.ReadEntries returned them with data
// (read[i] holds data.PodDeviceEntries[i]): the state keeps each one that it writes the same
// way as its own instead of making a new one. Neither data nor read may be modified
// afterwards.
func (s *State) Restore(data *checkpoint.Data, read []*checkpoint.Entry, now time.Time) (bad []checkpoint.PodDevicesEntry) {
	bad = s.restoreAssignments(data.PodDeviceEntries, read)
	for _, res := range SortedKeys(data.RegisteredDevices) {
		s.AddRestored(res, now)
	}
	if s.opts.KnowAssignedResources {
		for _, res := range s.AllocatedResources() {
			s.AddRestored(res, now)
		}
	}
	return bad
}

// restoreAssignments replaces every assignment with the entries' (see Restore), keeping
// kept[i] as the checkpoint entry of entries[i] where it is written the same way as the
// state's own would be; kept may be nil.
func (s *State) restoreAssignments(entries []checkpoint.PodDevicesEntry, kept []*checkpoint.Entry) (bad []checkpoint.PodDevicesEntry) {
	s.pods, s.held, s.order = make(podDevices, len(entries)), map[string]map[string]int{}, make(entryOrder, 0, len(entries))
	s.collectAll, s.gained = true, nil // the next collection looks at every pod, restored or not
	for _, r := range s.resources {
		r.free = nil
	}
	// Sized once: growing them device by device costs more than the pass that counts.
	for res, n := range namedDevices(entries) {
		s.held[res] = make(map[string]int, n)
	}
	// The file's order is the state's: each entry is recorded in turn, and of two entries for
	// one container and resource the later replaces the earlier, in its own place.
	var replaced map[*checkpoint.Entry]bool
	defer func() {
		for res, counts := range s.held {
			if len(counts) == 0 {
				delete(s.held, res) // as hold leaves it: no entry for a resource nothing holds
			}
		}
		s.order.removeAll(replaced)
		s.settled = nil
		s.findContests()
	}()
	for i := range entries {
		e := &entries[i]
		// The answer stays in wire form until first needed (Allocation.Response); only
		// whether it decodes is checked now, as an entry whose answer does not is dropped.
		if !validAllocResp(e.AllocResp) {
			bad = append(bad, *e)
			continue
		}
		var a *Allocation
		if kept != nil && writtenAsIs(e) {
			a = newAllocation(e.DeviceIDs, nil, e.AllocResp)
			a.entry = kept[i]
		} else {
			devs := checkpoint.DevicesPerNUMA{}
			for n, ids := range e.DeviceIDs {
				devs[n] = append([]string(nil), ids...)
			}
			raw := e.AllocResp
			if raw == nil {
				raw = []byte{}
			}
			a = newAllocation(devs, nil, raw)
		}
		if old := s.pods[e.PodUID][e.ContainerName][e.ResourceName]; old != nil && old.entry != nil {
			if replaced == nil {
				replaced = map[*checkpoint.Entry]bool{}
			}
			replaced[old.entry] = true
		}
		s.record(e.PodUID, e.ContainerName, e.ResourceName, a)
		if a.entry != nil {
			s.order.add(a.entry)
		}
	}
	return bad
}

// writtenAsIs reports whether the state writes a restored entry back as it was read: the
// restore turns a null DeviceIDs into {}, a null or empty device list into null, and a null
// AllocResp into "".
func writtenAsIs(e *checkpoint.PodDevicesEntry) bool {
	if e.DeviceIDs == nil || e.AllocResp == nil {
		return false
	}
	for _, ids := range e.DeviceIDs {
		if len(ids) == 0 {
			return false
		}
	}
	return true
}

// namedDevices counts, per resource, the device IDs the entries name (repeats included).
func namedDevices(entries []checkpoint.PodDevicesEntry) map[string]int {
	n := map[string]int{}
	for i := range entries {
		for _, ids := range entries[i].DeviceIDs {
			n[entries[i].ResourceName] += len(ids)
		}
	}
	return n
}

// DropConflictingEntries returns the entries of which no device is also named by an entry of
// another pod for the same resource, and those that share a device across pods. Entries of
// one pod may share a device: a regular init container's devices are reused by the pod's
// later containers. The device manager keeps conflicting entries instead (Restore makes
// their devices contested, see Contest), so that no claimed device is handed out.
func DropConflictingEntries(in []checkpoint.PodDevicesEntry) (keep, conflicts []checkpoint.PodDevicesEntry) {
	owners := map[string]map[string]sets.Set[string]{} // resource → device → pods naming it
	ids := func(e checkpoint.PodDevicesEntry) sets.Set[string] {
		s := sets.New[string]()
		for _, list := range e.DeviceIDs {
			s.Insert(list...)
		}
		return s
	}
	for _, e := range in {
		if owners[e.ResourceName] == nil {
			owners[e.ResourceName] = map[string]sets.Set[string]{}
		}
		for id := range ids(e) {
			if owners[e.ResourceName][id] == nil {
				owners[e.ResourceName][id] = sets.New[string]()
			}
			owners[e.ResourceName][id].Insert(e.PodUID)
		}
	}
	for _, e := range in {
		shared := false
		for id := range ids(e) {
			if owners[e.ResourceName][id].Len() > 1 {
				shared = true
			}
		}
		if shared {
			conflicts = append(conflicts, e)
		} else {
			keep = append(keep, e)
		}
	}
	return keep, conflicts
}

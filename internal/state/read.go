package state

import (
	"iter"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
)

// The read accessors below return the state's own sets and maps: read them, never change or
// keep them past the owner's lock.

// Listed returns the resources that have device sets (a device list, or a checkpoint record),
// sorted.
func (s *State) Listed() []string {
	var out []string
	for _, name := range SortedKeys(s.resources) {
		if s.resources[name].hasSets() {
			out = append(out, name)
		}
	}
	return out
}

// Names returns every resource the state knows: with a plugin record or with assignments,
// sorted.
func (s *State) Names() []string {
	names := sets.New(SortedKeys(s.resources)...)
	names.Insert(SortedKeys(s.held)...)
	return sets.List(names)
}

// Healthy returns the resource's healthy devices; nil when it has no device sets.
func (s *State) Healthy(res string) sets.Set[string] {
	if r := s.resources[res]; r != nil {
		return r.healthy
	}
	return nil
}

// Unhealthy returns the resource's unhealthy devices; nil when it has no device sets.
func (s *State) Unhealthy(res string) sets.Set[string] {
	if r := s.resources[res]; r != nil {
		return r.unhealthy
	}
	return nil
}

// Device returns the device as its plugin last listed it, and whether it is listed.
func (s *State) Device(res, id string) (ListedDevice, bool) { return s.listed(res).lookup(id) }

// Devices returns the resource's listed devices, in no particular order. The state must not
// change while the sequence is iterated.
func (s *State) Devices(res string) iter.Seq2[string, ListedDevice] {
	l := s.listed(res)
	return func(yield func(string, ListedDevice) bool) {
		if l == nil {
			return
		}
		for id, info := range l.byID {
			if !yield(id, ListedDevice{Health: l.health(id, info), NUMANodes: l.topologies[info.topology()].nodes}) {
				return
			}
		}
	}
}

// IsListed reports whether the resource's plugin listed the device.
func (s *State) IsListed(res, id string) bool { return s.listed(res).has(id) }

// Allocated returns the devices of the resource some container holds, as a new set.
func (s *State) Allocated(res string) sets.Set[string] {
	out := sets.New[string]()
	for id := range s.held[res] {
		out.Insert(id)
	}
	return out
}

// AllocatedAmong returns the devices of ids that some container of the resource holds, in no
// particular order (nil for none). It walks the smaller of ids and the held devices, and
// copies neither.
func (s *State) AllocatedAmong(res string, ids sets.Set[string]) []string {
	held := s.held[res]
	var out []string
	if len(ids) < len(held) {
		for id := range ids {
			if held[id] > 0 {
				out = append(out, id)
			}
		}
		return out
	}
	for id, n := range held {
		if n > 0 && ids.Has(id) {
			out = append(out, id)
		}
	}
	return out
}

// PluginStatus is what the state knows of a resource's plugin.
type PluginStatus struct {
	// Known: the resource has a plugin record.
	Known bool
	// Connected: an instance is current and its stream open.
	Connected bool
	// Listed: the current instance has sent a device list.
	Listed bool
	// StoppedAt: when the plugin went away (zero while connected).
	StoppedAt time.Time
}

// Plugin returns what the state knows of the resource's plugin.
func (s *State) Plugin(res string) PluginStatus {
	r := s.resources[res]
	if r == nil {
		return PluginStatus{}
	}
	return PluginStatus{Known: true, Connected: r.connected, Listed: r.listed, StoppedAt: r.stoppedAt}
}

// EachAllocation calls fn for every assignment, in pod, container and resource order.
func (s *State) EachAllocation(fn func(podUID, container, res string, a *Allocation)) {
	for _, podUID := range SortedKeys(s.pods) {
		for _, container := range SortedKeys(s.pods[podUID]) {
			for _, res := range SortedKeys(s.pods[podUID][container]) {
				fn(podUID, container, res, s.pods[podUID][container][res])
			}
		}
	}
}

package state

import (
	"slices"
	"sort"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// NoTopology is the pseudo NUMA node under which devices without topology are recorded.
const NoTopology int64 = -1

// Allocation is what one container holds of one resource: the device IDs per NUMA node and
// the plugin's Allocate answer for them (see Response). The owner must not modify it.
type Allocation struct {
	Devices checkpoint.DevicesPerNUMA
	// resp is the decoded answer: set at once for a new allocation, on first use for one
	// restored from a checkpoint, whose raw form was checked to decode (validAllocResp).
	resp atomic.Pointer[pluginapi.ContainerAllocateResponse]
	raw  []byte // the answer in wire form, as checkpointed; nil if it could not be marshalled
	// entry is the allocation's checkpoint entry, made when it is recorded (nil when raw is):
	// an allocation never changes, so its encoding is kept from one write to the next.
	entry *checkpoint.Entry
}

// Response returns the plugin's Allocate answer, nil if there is none. An allocation restored
// from a checkpoint keeps the answer in wire form until it is first asked for: a restart with
// many pods does not build answers that only a container start reads. Safe for concurrent use.
func (a *Allocation) Response() *pluginapi.ContainerAllocateResponse {
	if r := a.resp.Load(); r != nil || a.raw == nil {
		return r
	}
	r := &pluginapi.ContainerAllocateResponse{}
	if err := proto.Unmarshal(a.raw, r); err != nil {
		// Restored answers are checked with validAllocResp, which accepts exactly what
		// Unmarshal does; an answer that does not decode is treated as none.
		return nil
	}
	a.resp.CompareAndSwap(nil, r)
	return a.resp.Load()
}

// IDs returns the allocation's device IDs, each once.
func (a *Allocation) IDs() sets.Set[string] {
	s := sets.New[string]()
	for _, list := range a.Devices {
		s.Insert(list...)
	}
	return s
}

// newAllocation keeps raw as the wire form when given (restored from a checkpoint), and
// marshals resp otherwise, deterministically (map fields in key order), so that one answer
// is always written as the same bytes.
func newAllocation(devs checkpoint.DevicesPerNUMA, resp *pluginapi.ContainerAllocateResponse, raw []byte) *Allocation {
	a := &Allocation{Devices: devs, raw: raw}
	if resp != nil {
		a.resp.Store(resp)
	}
	if a.raw == nil && resp != nil {
		if b, err := (proto.MarshalOptions{Deterministic: true}).Marshal(resp); err == nil {
			a.raw = b
			if a.raw == nil {
				a.raw = []byte{}
			}
		}
	}
	return a
}

// podDevices records which devices every container holds: pod UID → container → resource.
type podDevices map[string]map[string]map[string]*Allocation

func (p podDevices) set(podUID, container, resource string, a *Allocation) {
	if p[podUID] == nil {
		p[podUID] = map[string]map[string]*Allocation{}
	}
	if p[podUID][container] == nil {
		p[podUID][container] = map[string]*Allocation{}
	}
	p[podUID][container][resource] = a
}

// hold adds (delta 1) or drops (delta -1) one container's hold on the allocation's devices.
func (s *State) hold(res string, a *Allocation, delta int) {
	counts := s.held[res]
	if counts == nil {
		counts = map[string]int{}
		s.held[res] = counts
	}
	a.eachID(func(id string) {
		before := counts[id]
		after := before + delta
		if after <= 0 {
			delete(counts, id)
		} else {
			counts[id] = after
		}
		if (before > 0) != (after > 0) {
			s.refreshFree(res, id)
		}
	})
	if len(counts) == 0 {
		delete(s.held, res)
	}
}

// eachID calls f with each of the allocation's device IDs once. A device under several NUMA
// nodes is named once per node; a short list under one node (the common case) is checked for
// repeats in place rather than through a set.
func (a *Allocation) eachID(f func(id string)) {
	if len(a.Devices) == 1 {
		for _, ids := range a.Devices {
			if len(ids) > 16 {
				break
			}
			for i, id := range ids {
				if !slices.Contains(ids[:i], id) {
					f(id)
				}
			}
			return
		}
	}
	for id := range a.IDs() {
		f(id)
	}
}

// put records the allocation, replacing (and un-holding) whatever the container held of the
// resource.
func (s *State) put(podUID, container, res string, a *Allocation) {
	if old := s.pods[podUID][container][res]; old != nil && old.entry != nil {
		s.order.remove(old.entry)
	}
	s.record(podUID, container, res, a)
	if a.entry != nil {
		s.order.add(a.entry)
	}
}

// record is put without touching the checkpoint order, for a caller that keeps the order
// itself (a restore, which takes the file's). An allocation that comes with its checkpoint
// entry (a restored one) keeps it.
func (s *State) record(podUID, container, res string, a *Allocation) {
	old := s.pods[podUID][container][res]
	if old != nil {
		s.hold(res, old, -1)
	}
	if a.raw != nil && a.entry == nil {
		a.entry = checkpoint.NewEntry(checkpoint.PodDevicesEntry{
			PodUID: podUID, ContainerName: container, ResourceName: res,
			DeviceIDs: a.Devices, AllocResp: a.raw,
		})
	}
	if s.pods[podUID] == nil {
		s.gain(podUID)
	}
	s.pods.set(podUID, container, res, a)
	s.hold(res, a, 1)
	if old != nil && len(s.contested[res]) > 0 {
		s.releaseClaims(podUID, res, old)
	}
}

// drop removes the container's allocation of the resource, if any, and returns its checkpoint
// entry (nil if none). Unless keepOrder, the entry leaves the checkpoint order too; a caller
// dropping many removes them from the order at once.
func (s *State) drop(podUID, container, res string, keepOrder bool) *checkpoint.Entry {
	a := s.pods[podUID][container][res]
	if a == nil {
		return nil
	}
	s.hold(res, a, -1)
	if a.entry != nil && !keepOrder {
		s.order.remove(a.entry)
	}
	delete(s.pods[podUID][container], res)
	if len(s.pods[podUID][container]) == 0 {
		delete(s.pods[podUID], container)
	}
	if len(s.pods[podUID]) == 0 {
		delete(s.pods, podUID)
	}
	if len(s.contested[res]) > 0 {
		s.releaseClaims(podUID, res, a)
	}
	return a.entry
}

// HasPod reports whether the pod holds any allocation.
func (s *State) HasPod(podUID string) bool { _, ok := s.pods[podUID]; return ok }

// PodUIDs returns the UIDs of the pods holding allocations, sorted.
func (s *State) PodUIDs() []string { return SortedKeys(s.pods) }

// Containers returns the names of the pod's containers holding allocations, sorted.
func (s *State) Containers(podUID string) []string { return SortedKeys(s.pods[podUID]) }

// Allocations returns the container's allocations by resource; nil when it holds none. The
// map is the state's own: read it, do not keep or change it.
func (s *State) Allocations(podUID, container string) map[string]*Allocation {
	return s.pods[podUID][container]
}

// ContainerDevices returns the IDs the container holds of the resource, or nil when it holds
// no entry for it (an entry with no devices gives an empty, non-nil set).
func (s *State) ContainerDevices(podUID, container, res string) sets.Set[string] {
	a := s.pods[podUID][container][res]
	if a == nil {
		return nil
	}
	return a.IDs()
}

// PodDevices returns the union of the devices the pod's containers hold of the resource, or
// nil when none holds an entry for it.
func (s *State) PodDevices(podUID, res string) sets.Set[string] {
	var out sets.Set[string]
	for container := range s.pods[podUID] {
		if ids := s.ContainerDevices(podUID, container, res); ids != nil {
			out = ids.Union(out)
		}
	}
	return out
}

// AllocatedCount returns how many devices of the resource are held by some container.
func (s *State) AllocatedCount(res string) int { return len(s.held[res]) }

// AllocatedResources returns the resources of which some container holds a device, sorted.
func (s *State) AllocatedResources() []string { return SortedKeys(s.held) }

// isAllocated reports whether some container holds the device.
func (s *State) isAllocated(res, id string) bool { return s.held[res][id] > 0 }

// PodsHolding returns the UIDs of the pods holding any of the resource's IDs, each once, in
// pod UID order. The kubelet matches IDs across all resources; the core matches within the
// resource, so equal IDs of two resources cannot wake the wrong pod.
func (s *State) PodsHolding(res string, ids []string) []string {
	held := s.held[res]
	if len(held) == 0 {
		return nil // a plugin's first list after a start: no need to look at its devices
	}
	want := make(sets.Set[string], min(len(ids), len(held)))
	for _, id := range ids {
		if held[id] > 0 {
			want.Insert(id)
		}
	}
	if want.Len() == 0 {
		return nil // no pod holds any of them: no need to look at the pods
	}
	// When every held device is wanted (a plugin's first list after a restart names them
	// all), each pod holding one of the resource's devices qualifies without a lookup.
	every := want.Len() == len(held)
	var uids []string
	for podUID, containers := range s.pods {
		if holdsAny(containers, res, want, every) {
			uids = append(uids, podUID)
		}
	}
	sort.Strings(uids)
	return uids
}

// holdsAny reports whether one of the containers holds one of the resource's devices in
// want, or, with every set, any device of the resource.
func holdsAny(containers map[string]map[string]*Allocation, res string, want sets.Set[string], every bool) bool {
	for _, resources := range containers {
		a := resources[res]
		if a == nil {
			continue
		}
		for _, list := range a.Devices {
			if every && len(list) > 0 {
				return true
			}
			for _, id := range list {
				if want.Has(id) {
					return true
				}
			}
		}
	}
	return false
}

// SortedKeys returns the keys of m in ascending order.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

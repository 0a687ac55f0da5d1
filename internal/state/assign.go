package state

import (
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// release drops the reservations of ids, made by Select.
func (s *State) release(res string, ids sets.Set[string]) {
	if s.pending[res] == nil {
		return
	}
	s.pending[res] = s.pending[res].Difference(ids)
	if s.pending[res].Len() == 0 {
		delete(s.pending, res)
	}
	for id := range ids {
		s.refreshFree(res, id)
	}
}

// DevicesPerNUMA groups ids by the NUMA nodes their plugin reports (NoTopology for none),
// as the checkpoint records them. It reports false, naming the first, when an ID is not in
// the resource's list.
func (s *State) DevicesPerNUMA(res string, ids sets.Set[string]) (checkpoint.DevicesPerNUMA, string, bool) {
	devs := checkpoint.DevicesPerNUMA{}
	l := s.listed(res)
	for _, id := range sets.List(ids) {
		if !l.has(id) {
			return nil, id, false
		}
		nodes := l.nodes(id)
		if len(nodes) == 0 {
			devs[NoTopology] = append(devs[NoTopology], id)
			continue
		}
		for _, n := range nodes {
			devs[n] = append(devs[n], id)
		}
	}
	return devs, "", true
}

// Commit turns the reservation of ids into the container's allocation of the resource, with
// the plugin's answer.
func (s *State) Commit(podUID, container, res string, ids sets.Set[string], devs checkpoint.DevicesPerNUMA, resp *pluginapi.ContainerAllocateResponse) {
	s.release(res, ids)
	s.put(podUID, container, res, newAllocation(devs, resp, nil))
}

// uncommit removes the container's allocations of the given resources (a commit whose
// checkpoint write failed).
func (s *State) uncommit(podUID, container string, resources []string) {
	for _, res := range resources {
		s.drop(podUID, container, res, false)
	}
}

// reusePool returns a copy of the pod's init-container reuse pool: per resource, the devices
// its completed regular init containers held that later containers may take. It starts the
// pool if the pod has none.
func (s *State) reusePool(podUID string) map[string]sets.Set[string] {
	if s.reuse[podUID] == nil {
		s.reuse[podUID] = map[string]sets.Set[string]{}
		s.gain(podUID)
	}
	out := make(map[string]sets.Set[string], len(s.reuse[podUID]))
	for k, v := range s.reuse[podUID] {
		out[k] = v.Clone()
	}
	return out
}

// PoolOf returns the pod's reuse pool of the resource, read-only; nil if none.
func (s *State) PoolOf(podUID, res string) sets.Set[string] { return s.reuse[podUID][res] }

// containerAllocated updates the pod's reuse pool after the container's allocation: a regular
// init container adds what it holds; a sidecar or app container takes what it holds out. A pod
// whose pool was garbage-collected meanwhile is left without one.
//
// A pool left with no device is dropped: the pod's next allocation starts a new one
// (reusePool), and garbage collection only has the pools that hold devices to look at.
func (s *State) containerAllocated(podUID, container string, regularInit bool) {
	pool := s.reuse[podUID]
	if pool == nil {
		return
	}
	for res, a := range s.pods[podUID][container] {
		ids := a.IDs()
		if regularInit {
			pool[res] = ids.Union(pool[res])
		} else if pool[res] != nil {
			pool[res] = pool[res].Difference(ids)
		}
	}
	for _, ids := range pool {
		if ids.Len() > 0 {
			return
		}
	}
	delete(s.reuse, podUID)
}

// IsContainerAlreadyRunning reports whether the runtime reported the container running when
// the owner started. With Options.KeepCompletedInitDevices, a container holding an allocation
// in a pod with any running container counts as running too.
func (s *State) IsContainerAlreadyRunning(podUID, container string) bool {
	if s.running.Has(ContainerKey{PodUID: podUID, ContainerName: container}) {
		return true
	}
	if !s.opts.KeepCompletedInitDevices || len(s.pods[podUID][container]) == 0 {
		return false
	}
	for key := range s.running {
		if key.PodUID == podUID {
			return true
		}
	}
	return false
}

// Reservations returns how many devices allocations in flight have reserved, over every
// resource.
func (s *State) Reservations() int {
	n := 0
	for _, ids := range s.pending {
		n += ids.Len()
	}
	return n
}

package devicemanager

import (
	"math/bits"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// GetTopologyHints returns, per device-plugin resource the container asks for, the NUMA node
// sets its request can be met from. A nil list means "no preference" (the resource has no
// topology); an empty list means the request cannot be met.
func (m *ManagerImpl) GetTopologyHints(pod *v1.Pod, container *v1.Container) map[string][]TopologyHint {
	m.UpdateAllocatedDevices()
	podUID := string(pod.UID)
	m.mu.Lock()
	defer m.mu.Unlock()
	requests := map[string]int{}
	for name, qty := range container.Resources.Limits {
		requests[string(name)] = int(qty.Value())
	}
	reusable := m.devicesToReuse[podUID]
	return m.hintsLocked(requests, func(res string) sets.Set[string] {
		return m.pods.containerDevices(podUID, container.Name, res)
	}, func(res string) sets.Set[string] { return reusable[res] })
}

// GetPodTopologyHints is GetTopologyHints for the whole pod: the request per resource is the
// larger of the init-container peak and the sum of app containers and sidecars, and already
// allocated devices are the union over the pod's containers.
func (m *ManagerImpl) GetPodTopologyHints(pod *v1.Pod) map[string][]TopologyHint {
	m.UpdateAllocatedDevices()
	podUID := string(pod.UID)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hintsLocked(podDeviceRequests(pod), func(res string) sets.Set[string] {
		var held sets.Set[string]
		for container := range m.pods[podUID] {
			if ids := m.pods.containerDevices(podUID, container, res); ids != nil {
				held = ids.Union(held)
			}
		}
		return held
	}, func(string) sets.Set[string] { return nil })
}

func (m *ManagerImpl) hintsLocked(requests map[string]int, held, reusable func(string) sets.Set[string]) map[string][]TopologyHint {
	hints := map[string][]TopologyHint{}
	for res, request := range requests {
		if !m.isDevicePluginResourceLocked(res) {
			continue
		}
		if !m.resourceHasTopologyLocked(res) {
			hints[res] = nil
			continue
		}
		if allocated := held(res); allocated.Len() > 0 {
			if allocated.Len() != request {
				hints[res] = []TopologyHint{}
				continue
			}
			hints[res] = m.generateHintsLocked(res, allocated, sets.New[string](), request)
			continue
		}
		available := m.healthy[res].Difference(m.allocated[res]).Difference(m.pending[res])
		reuse := reusable(res)
		if available.Union(reuse).Len() < request {
			hints[res] = []TopologyHint{}
			continue
		}
		hints[res] = m.generateHintsLocked(res, available, reuse, request)
	}
	return hints
}

// deviceNUMANodesLocked is the sorted union of the NUMA nodes of every device of the resource
// that the machine knows (cfg.NUMANodes); the machine's nodes when that is empty. As in the
// kubelet, a node the machine does not list is dropped, so with no machine nodes configured
// the result is empty even when devices report nodes.
func (m *ManagerImpl) deviceNUMANodesLocked(res string) []int {
	machine := sets.New(m.cfg.NUMANodes...)
	nodes := sets.New[int]()
	for id := range m.allDevices[res] {
		for _, n := range m.deviceNodesLocked(res, id) {
			if !machine.Has(n) {
				m.log.V(4).Info("Ignored NUMA node unknown to the machine", "resourceName", res, "numaNode", n)
				continue
			}
			nodes.Insert(n)
		}
	}
	if nodes.Len() == 0 {
		return sets.List(machine)
	}
	return sets.List(nodes)
}

// generateHintsLocked enumerates every non-empty subset of the device-bearing NUMA nodes, by
// size and then in lexicographic order of their nodes (the kubelet's order), and keeps those
// from which the request can be met. A reusable device with topology must touch the subset
// and counts towards the request; a reusable device without topology (or no longer reported)
// is neither checked nor counted, as in the kubelet. Hints of the smallest size that could
// hold the request over all devices are preferred. With no nodes at all the list is empty;
// beyond 62 nodes it is nil (no preference) rather than an enumeration of 2^n subsets.
func (m *ManagerImpl) generateHintsLocked(res string, available, reusable sets.Set[string], request int) []TopologyHint {
	nodes := m.deviceNUMANodesLocked(res)
	if len(nodes) > 62 {
		return nil
	}
	touches := func(id string, mask uint64) bool {
		for _, n := range m.deviceNodesLocked(res, id) {
			if i := sort.SearchInts(nodes, n); i < len(nodes) && nodes[i] == n && mask&(1<<uint(i)) != 0 {
				return true
			}
		}
		return false
	}
	minSize := len(nodes)
	hints := []TopologyHint{}
	var masks []uint64
	forEachSubset(len(nodes), func(mask uint64) {
		size := bits.OnesCount64(mask)
		total := 0
		for id := range m.allDevices[res] {
			if touches(id, mask) {
				total++
			}
		}
		if total >= request && size < minSize {
			minSize = size
		}
		matching := 0
		for id := range reusable {
			if d, known := m.allDevices[res][id]; !known || d.Topology == nil {
				continue
			}
			if !touches(id, mask) {
				return
			}
			matching++
		}
		for id := range available {
			if touches(id, mask) {
				matching++
			}
		}
		if matching >= request {
			masks = append(masks, mask)
		}
	})
	for _, mask := range masks {
		var ns []int
		for i, n := range nodes {
			if mask&(1<<uint(i)) != 0 {
				ns = append(ns, n)
			}
		}
		hints = append(hints, TopologyHint{NUMANodes: ns, Preferred: bits.OnesCount64(mask) == minSize})
	}
	return hints
}

// forEachSubset calls fn with every non-empty subset of n elements (n <= 62) as a bit mask:
// subsets of one element first, then of two, and so on; within one size in lexicographic
// order of the element indexes ({0,1} {0,2} {1,2} for n = 3).
func forEachSubset(n int, fn func(mask uint64)) {
	var walk func(from, left int, mask uint64)
	walk = func(from, left int, mask uint64) {
		if left == 0 {
			fn(mask)
			return
		}
		for i := from; i <= n-left; i++ {
			walk(i+1, left-1, mask|1<<uint(i))
		}
	}
	for size := 1; size <= n; size++ {
		walk(0, size, 0)
	}
}

// podDeviceRequests computes the pod's effective limit per resource: the larger of the peak
// during init (a regular init container plus the sidecars started before it, or the sidecars
// so far) and the steady state (app containers plus every sidecar).
func podDeviceRequests(pod *v1.Pod) map[string]int {
	steady := map[string]int{}
	for _, c := range pod.Spec.Containers {
		for name, q := range c.Resources.Limits {
			steady[string(name)] += int(q.Value())
		}
	}
	peak := map[string]int{}
	sidecars := map[string]int{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		for name, q := range c.Resources.Limits {
			res, v := string(name), int(q.Value())
			if isRestartable(c) {
				sidecars[res] += v
				peak[res] = max(peak[res], sidecars[res])
			} else {
				peak[res] = max(peak[res], v+sidecars[res])
			}
		}
	}
	for res, v := range sidecars {
		steady[res] += v
	}
	out := map[string]int{}
	for res, v := range steady {
		out[res] = v
	}
	for res, v := range peak {
		out[res] = max(out[res], v)
	}
	return out
}

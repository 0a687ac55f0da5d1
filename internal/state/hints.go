package state

import (
	"math/bits"
	"sort"

	"k8s.io/apimachinery/pkg/util/sets"
)

// Hints returns, per device-plugin resource among requests, the NUMA node sets the request
// can be met from: nil means no preference (the resource has no topology), empty means the
// request cannot be met. held gives the devices the container (or pod) already holds of a
// resource, reusable its reuse pool; machineNodes are the machine's NUMA nodes. The subsets
// range over the nodes the resource's devices are on, or with everyNode over every machine
// node, device-less ones included, as the kubelet v1.35 enumerates them.
func (s *State) Hints(requests map[string]int, held, reusable func(string) sets.Set[string], machineNodes []int, everyNode bool) map[string][]TopologyHint {
	hints := map[string][]TopologyHint{}
	for res, request := range requests {
		if !s.IsDevicePluginResource(res) {
			continue
		}
		if !s.resourceHasTopology(res) {
			hints[res] = nil
			continue
		}
		if allocated := held(res); allocated.Len() > 0 {
			if allocated.Len() != request {
				hints[res] = []TopologyHint{}
				continue
			}
			hints[res] = s.generateHints(res, allocated, sets.New[string](), request, machineNodes, everyNode)
			continue
		}
		available := s.available(res)
		reuse := reusable(res)
		if available.Len()+reuse.Difference(available).Len() < request {
			hints[res] = []TopologyHint{}
			continue
		}
		hints[res] = s.generateHints(res, available, reuse, request, machineNodes, everyNode)
	}
	return hints
}

// deviceNUMANodes is the sorted union of the NUMA nodes of every device of the resource
// that the machine knows (machineNodes); the machine's nodes when that is empty. As in the
// kubelet, a node the machine does not list is dropped, so with no machine nodes configured
// the result is empty even when devices report nodes.
func (s *State) deviceNUMANodes(res string, machineNodes []int) []int {
	machine := sets.New(machineNodes...)
	nodes := sets.New[int]()
	for _, n := range s.listed(res).deviceNUMANodes() {
		if machine.Has(int(n)) {
			nodes.Insert(int(n))
		}
	}
	if nodes.Len() == 0 {
		return sets.List(machine)
	}
	return sets.List(nodes)
}

// generateHints enumerates every non-empty subset of the device-bearing NUMA nodes, by
// size and then in lexicographic order of their nodes (the kubelet's order), and keeps those
// from which the request can be met. A reusable device with topology must touch the subset
// and counts towards the request; a reusable device without topology (or no longer reported)
// is neither checked nor counted, as in the kubelet. Hints of the smallest size that could
// hold the request over all devices are preferred. With no nodes at all the list is empty;
// beyond 62 nodes it is nil (no preference) rather than an enumeration of 2^n subsets.
// Devices are counted per distinct topology, so the cost per subset does not grow with the
// number of devices.
func (s *State) generateHints(res string, available, reusable sets.Set[string], request int, machineNodes []int, everyNode bool) []TopologyHint {
	nodes := s.deviceNUMANodes(res, machineNodes)
	if everyNode {
		nodes = sets.List(sets.New(machineNodes...))
	}
	if len(nodes) > 62 {
		return nil
	}
	touches := func(devNodes []int64, mask uint64) bool {
		for _, n := range devNodes {
			if i := sort.SearchInts(nodes, int(n)); i < len(nodes) && nodes[i] == int(n) && mask&(1<<uint(i)) != 0 {
				return true
			}
		}
		return false
	}
	l := s.listed(res)
	if l == nil {
		l = newDeviceTable(0)
	}
	availablePerTopology := make([]int, len(l.topologies))
	for id := range available {
		availablePerTopology[l.byID[id].topology()]++
	}
	minSize := len(nodes)
	hints := []TopologyHint{}
	var masks []uint64
	forEachSubset(len(nodes), func(mask uint64) {
		size := bits.OnesCount64(mask)
		total, matching := 0, 0
		for i, t := range l.topologies {
			if touches(t.nodes, mask) {
				total += t.devices
				matching += availablePerTopology[i]
			}
		}
		if total >= request && size < minSize {
			minSize = size
		}
		for id := range reusable {
			devNodes := l.nodes(id)
			if devNodes == nil {
				continue
			}
			if !touches(devNodes, mask) {
				return
			}
			matching++
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

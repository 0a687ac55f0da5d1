package state

import (
	"sort"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TopologyHint is a set of NUMA nodes a container's devices may come from, and whether that
// set is as small as the resource allows. A nil NUMANodes means "no preference".
type TopologyHint struct {
	NUMANodes []int
	Preferred bool
}

// deviceNodes returns the NUMA nodes of a device of the resource; nil when the device
// has no topology or is unknown.
func (s *State) deviceNodes(res, id string) []int {
	d := s.device(res, id)
	if d == nil || d.Topology == nil {
		return nil
	}
	nodes := make([]int, 0, len(d.Topology.Nodes))
	for _, n := range d.Topology.Nodes {
		nodes = append(nodes, int(n.ID))
	}
	return nodes
}

// resourceHasTopologyLocked reports whether any device of the resource names a NUMA node.
func (s *State) resourceHasTopology(res string) bool {
	for _, d := range s.devices(res) {
		if d.Topology != nil && len(d.Topology.Nodes) > 0 {
			return true
		}
	}
	return false
}

// filterByAffinity splits the available devices into those aligned with the container's
// NUMA hint (from its AffinityStore), those on other nodes, and those without topology. Nodes are visited hint nodes
// first, then other nodes, each group by ascending device count, then "no topology"; a device
// goes to the list of the first node that holds it. Without a hint, or when the resource has
// no topology at all, every device counts as having no affinity.
func (s *State) filterByAffinity(hint TopologyHint, res string, available sets.Set[string]) (aligned, unaligned, noAffinity sets.Set[string]) {
	aligned, unaligned, noAffinity = sets.New[string](), sets.New[string](), sets.New[string]()
	if hint.NUMANodes == nil || !s.resourceHasTopology(res) {
		return aligned, unaligned, available.Clone()
	}
	inHint := sets.New(hint.NUMANodes...)
	perNode := map[int][]string{}
	for id := range available {
		nodes := s.deviceNodes(res, id)
		if len(nodes) == 0 {
			perNode[int(NoTopology)] = append(perNode[int(NoTopology)], id)
			continue
		}
		for _, n := range nodes {
			perNode[n] = append(perNode[n], id)
		}
	}
	order := make([]int, 0, len(perNode))
	for n := range perNode {
		order = append(order, n)
	}
	rank := func(n int) int {
		switch {
		case inHint.Has(n):
			return 0
		case n == int(NoTopology):
			return 2
		default:
			return 1
		}
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if rank(a) != rank(b) {
			return rank(a) < rank(b)
		}
		if len(perNode[a]) != len(perNode[b]) {
			return len(perNode[a]) < len(perNode[b])
		}
		return a < b
	})
	seen := sets.New[string]()
	for _, n := range order {
		for _, id := range perNode[n] {
			if seen.Has(id) {
				continue
			}
			seen.Insert(id)
			switch rank(n) {
			case 0:
				aligned.Insert(id)
			case 1:
				unaligned.Insert(id)
			default:
				noAffinity.Insert(id)
			}
		}
	}
	return aligned, unaligned, noAffinity
}

// device returns the resource's listed device id; nil if it is not listed.
func (s *State) device(res, id string) *pluginapi.Device {
	if r := s.resources[res]; r != nil {
		return r.all[id]
	}
	return nil
}

// devices returns the resource's listed devices by ID, read-only.
func (s *State) devices(res string) map[string]*pluginapi.Device {
	if r := s.resources[res]; r != nil {
		return r.all
	}
	return nil
}

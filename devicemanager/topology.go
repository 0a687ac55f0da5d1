package devicemanager

import (
	"sort"

	"k8s.io/apimachinery/pkg/util/sets"
)

// TopologyHint is a set of NUMA nodes a container's devices may come from, and whether that
// set is as small as the resource allows. A nil NUMANodes means "no preference".
type TopologyHint struct {
	NUMANodes []int
	Preferred bool
}

// AffinityStore supplies the NUMA affinity chosen for a container (the topology manager's
// decision). The manager prefers devices on those nodes. GetAffinity is called without the
// manager's lock held, from Allocate's goroutine: it may call back into the manager.
type AffinityStore interface {
	GetAffinity(podUID, containerName string) TopologyHint
}

// deviceNodesLocked returns the NUMA nodes of a device of the resource; nil when the device
// has no topology or is unknown. Callers hold mu.
func (m *ManagerImpl) deviceNodesLocked(res, id string) []int {
	d, ok := m.allDevices[res][id]
	if !ok || d.Topology == nil {
		return nil
	}
	nodes := make([]int, 0, len(d.Topology.Nodes))
	for _, n := range d.Topology.Nodes {
		nodes = append(nodes, int(n.ID))
	}
	return nodes
}

// resourceHasTopologyLocked reports whether any device of the resource names a NUMA node.
func (m *ManagerImpl) resourceHasTopologyLocked(res string) bool {
	for _, d := range m.allDevices[res] {
		if d.Topology != nil && len(d.Topology.Nodes) > 0 {
			return true
		}
	}
	return false
}

// filterByAffinityLocked splits the available devices into those aligned with the container's
// NUMA hint (from its AffinityStore), those on other nodes, and those without topology. Nodes are visited hint nodes
// first, then other nodes, each group by ascending device count, then "no topology"; a device
// goes to the list of the first node that holds it. Without a hint, or when the resource has
// no topology at all, every device counts as having no affinity. Callers hold mu.
func (m *ManagerImpl) filterByAffinityLocked(hint TopologyHint, res string, available sets.Set[string]) (aligned, unaligned, noAffinity sets.Set[string]) {
	aligned, unaligned, noAffinity = sets.New[string](), sets.New[string](), sets.New[string]()
	if hint.NUMANodes == nil || !m.resourceHasTopologyLocked(res) {
		return aligned, unaligned, available.Clone()
	}
	inHint := sets.New(hint.NUMANodes...)
	perNode := map[int][]string{}
	for id := range available {
		nodes := m.deviceNodesLocked(res, id)
		if len(nodes) == 0 {
			perNode[int(noTopology)] = append(perNode[int(noTopology)], id)
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
		case n == int(noTopology):
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

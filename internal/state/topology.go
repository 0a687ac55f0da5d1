package state

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

// listed returns the resource's device list; nil when it has none.
func (s *State) listed(res string) *deviceTable {
	if r := s.resources[res]; r != nil {
		return r.devs
	}
	return nil
}

// deviceNodes returns the NUMA nodes of a device of the resource; nil when the device
// has no topology or is unknown. The slice is the state's: read only.
func (s *State) deviceNodes(res, id string) []int64 { return s.listed(res).nodes(id) }

// resourceHasTopology reports whether any device of the resource names a NUMA node.
func (s *State) resourceHasTopology(res string) bool { return s.listed(res).hasTopology() }

// filterByAffinity splits the available devices into those aligned with the container's
// NUMA hint (from its AffinityStore), those on other nodes, and those without topology. Nodes
// are visited hint nodes first, then other nodes, each group by ascending device count, then
// "no topology"; a device goes to the list of the first node that holds it. Without a hint, or
// when the resource has no topology at all, every device counts as having no affinity and
// noAffinity is available itself. The sets are read only.
func (s *State) filterByAffinity(hint TopologyHint, res string, available sets.Set[string]) (aligned, unaligned, noAffinity sets.Set[string]) {
	aligned, unaligned, noAffinity = sets.New[string](), sets.New[string](), sets.New[string]()
	if hint.NUMANodes == nil || !s.resourceHasTopology(res) {
		return aligned, unaligned, available
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
			perNode[int(n)] = append(perNode[int(n)], id)
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

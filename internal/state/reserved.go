package state

import "k8s.io/apimachinery/pkg/util/sets"

// ReservedIDs returns, sorted, the devices of the resource that allocations in flight have
// picked (see Select): a read of the reservations alone, whatever the resource's size.
func (s *State) ReservedIDs(res string) []string { return sets.List(s.pending[res]) }

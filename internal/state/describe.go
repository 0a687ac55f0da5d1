package state

import (
	"fmt"
	"io"
	"sort"

	"k8s.io/apimachinery/pkg/util/sets"
)

// Describe writes a canonical description of the whole state: equal states give equal
// bytes. It is meant for debugging and for explorers that recognise states they have seen.
func (s *State) Describe(w io.Writer) {
	for _, name := range SortedKeys(s.resources) {
		r := s.resources[name]
		fmt.Fprintf(w, "resource %s connected=%v listed=%v named=%v stopped=%d healthy=%v unhealthy=%v devices=",
			name, r.connected, r.listed, r.named, r.stoppedAt.UnixNano(), sets.List(r.healthy), sets.List(r.unhealthy))
		if r.devs != nil {
			for _, id := range SortedKeys(r.devs.byID) {
				d, _ := r.devs.lookup(id)
				fmt.Fprintf(w, "%s:%s:", id, d.Health)
				if d.NUMANodes == nil {
					fmt.Fprint(w, "-,")
				} else {
					fmt.Fprintf(w, "%v,", d.NUMANodes)
				}
			}
		}
		fmt.Fprintln(w)
	}
	s.EachAllocation(func(pod, ctr, res string, a *Allocation) {
		fmt.Fprintf(w, "assigned %s/%s %s %v %x\n", pod, ctr, res, a.Devices, a.raw)
	})
	for _, res := range SortedKeys(s.pending) {
		fmt.Fprintf(w, "reserved %s %v\n", res, sets.List(s.pending[res]))
	}
	for _, pod := range SortedKeys(s.reuse) {
		for _, res := range SortedKeys(s.reuse[pod]) {
			fmt.Fprintf(w, "reuse %s %s %v\n", pod, res, sets.List(s.reuse[pod][res]))
		}
	}
	running := s.running.UnsortedList()
	sort.Slice(running, func(i, j int) bool {
		if running[i].PodUID != running[j].PodUID {
			return running[i].PodUID < running[j].PodUID
		}
		return running[i].ContainerName < running[j].ContainerName
	})
	fmt.Fprintf(w, "running %v\n", running)
}

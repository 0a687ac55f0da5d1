package state

import (
	"slices"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// RemoveInactive drops the assignments and reuse pools of the pods active does not name, and
// returns the UIDs of the pods whose assignments it dropped, sorted. It looks at every pod the
// state holds; RemoveDeparted gives the same result looking only at what changed.
func (s *State) RemoveInactive(active sets.Set[string]) []string {
	return s.collect(active.Has, nil, true)
}

// RemoveDeparted is RemoveInactive for an owner that follows the active pods from one garbage
// collection to the next: active reports whether a pod is active now, and departed names
// every pod that was active at the state's previous collection (by either method) and is not
// now; naming more pods, or one twice, is harmless. Every other pod the state held then was
// active then and still is, so only the departed pods and those that gained an assignment or
// a reuse pool since are looked at: the cost is that of what changed, not of every pod. The
// first collection of a state, and the first after a Restore, look at every pod.
func (s *State) RemoveDeparted(active func(podUID string) bool, departed []string) []string {
	return s.collect(active, departed, s.collectAll)
}

// collect drops the assignments and reuse pools of the pods active denies among those it
// looks at: every pod if all is set, else the departed ones and those gained since the
// previous collection. It returns the UIDs of the pods whose assignments it dropped, sorted.
func (s *State) collect(active func(podUID string) bool, departed []string, all bool) []string {
	var removed []string
	if all {
		for uid := range s.reuse {
			if !active(uid) {
				delete(s.reuse, uid)
			}
		}
		for uid := range s.pods {
			if !active(uid) {
				removed = append(removed, uid)
			}
		}
	} else {
		look := func(uid string) {
			if active(uid) {
				return
			}
			delete(s.reuse, uid)
			if _, ok := s.pods[uid]; ok {
				removed = append(removed, uid)
			}
		}
		for _, uid := range departed {
			look(uid)
		}
		for uid := range s.gained {
			look(uid)
		}
	}
	s.collectAll, s.gained = false, nil
	slices.Sort(removed)
	removed = slices.Compact(removed) // a pod both departed and gained is named twice
	gone := map[*checkpoint.Entry]bool{}
	for _, uid := range removed {
		for container, resources := range s.pods[uid] {
			for res := range resources {
				if e := s.drop(uid, container, res, true); e != nil {
					gone[e] = true
				}
			}
		}
	}
	s.order.removeAll(gone)
	return removed
}

// gain records that the pod gained an assignment or a reuse pool while it had none, for the
// next collection to look at.
func (s *State) gain(podUID string) {
	if s.collectAll {
		return // the next collection looks at every pod anyway
	}
	if s.gained == nil {
		s.gained = sets.New[string]()
	}
	s.gained.Insert(podUID)
}

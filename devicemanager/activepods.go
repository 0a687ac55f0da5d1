package devicemanager

import (
	v1 "k8s.io/api/core/v1"
)

// activePods follows the pods the source lists from one garbage collection to the next, so
// that a collection costs what changed rather than what the node runs. It knows the pod
// objects by their address: the source's pods are immutable objects by convention (a change
// to a pod is a new object), so an object listed again is the same pod with the same UID, and
// a listed object is looked at, its UID read, only the first time. Remembering an object
// keeps it alive, so its address cannot be another pod's while it is remembered. The zero
// value knows no pod. Guarded by the manager's mu.
type activePods struct {
	// round counts the updates; each remembered object carries the last it was listed in.
	round uint64
	// listed are the objects of the last list, each once, and index says where each is.
	listed []listedPod
	index  map[*v1.Pod]int
	// count holds, per UID, how many of those objects carry it: an updated pod may be listed
	// as a new object before the old one is gone, or both at once.
	count map[string]int
}

type listedPod struct {
	pod   *v1.Pod
	uid   string
	round uint64
}

// update makes pods the active pods and returns the UIDs that were active before and are
// not any more, each once, in no particular order. Its cost is a lookup by address per pod,
// and a pass over the remembered objects when some are no longer listed.
func (a *activePods) update(pods []*v1.Pod) (departed []string) {
	if a.index == nil {
		a.index, a.count = make(map[*v1.Pod]int, len(pods)), make(map[string]int, len(pods))
	}
	a.round++
	before, kept := len(a.listed), 0
	for _, p := range pods {
		if i, ok := a.index[p]; ok {
			if l := &a.listed[i]; l.round != a.round { // an object listed twice counts once
				l.round = a.round
				kept++
			}
			continue
		}
		uid := string(p.UID)
		a.index[p] = len(a.listed)
		a.listed = append(a.listed, listedPod{pod: p, uid: uid, round: a.round})
		a.count[uid]++
	}
	if kept == before {
		return nil // every object of the last list is listed again
	}
	// Forget the objects not listed this time, moving the last object into each one's place.
	for i := 0; i < len(a.listed); {
		l := a.listed[i]
		if l.round == a.round {
			i++
			continue
		}
		delete(a.index, l.pod)
		a.count[l.uid]--
		if a.count[l.uid] == 0 {
			delete(a.count, l.uid)
			departed = append(departed, l.uid)
		}
		last := len(a.listed) - 1
		a.listed[i], a.listed[last] = a.listed[last], listedPod{} // the forgotten object may go
		a.listed = a.listed[:last]
		if i < last {
			a.index[a.listed[i].pod] = i
		}
	}
	return departed
}

// has reports whether the pod was in the last list.
func (a *activePods) has(podUID string) bool { return a.count[podUID] > 0 }

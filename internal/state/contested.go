package state

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// Contest is a device that the assignments of more than one pod name. Allocation never makes
// one (it picks only devices nobody holds); only restored records that disagree do: a
// checkpoint that lists a device under two pods, or an owner's second copy of the assignments
// edited or mixed up while the checkpoint was lost. No record can be trusted over the other,
// so the state keeps every claim: the device stays held by each claimant, is handed to no
// other pod, and belongs to the last claimant left once the others are gone.
type Contest struct {
	Resource string
	DeviceID string
	// PodUIDs are the claimants, sorted; at least two.
	PodUIDs []string
}

// FindContests returns the devices that entries of more than one pod name, sorted by resource
// and device ID. Entries of one pod naming a device twice (an init container and the app
// container it handed the device to) are no contest.
func FindContests(entries []checkpoint.PodDevicesEntry) []Contest {
	claims := map[string]map[string]sets.Set[string]{} // resource → device → pods
	for i := range entries {
		e := &entries[i]
		for _, ids := range e.DeviceIDs {
			for _, id := range ids {
				if claims[e.ResourceName] == nil {
					claims[e.ResourceName] = map[string]sets.Set[string]{}
				}
				if claims[e.ResourceName][id] == nil {
					claims[e.ResourceName][id] = sets.New[string]()
				}
				claims[e.ResourceName][id].Insert(e.PodUID)
			}
		}
	}
	var out []Contest
	for _, res := range SortedKeys(claims) {
		for _, id := range SortedKeys(claims[res]) {
			if pods := claims[res][id]; pods.Len() > 1 {
				out = append(out, Contest{Resource: res, DeviceID: id, PodUIDs: sets.List(pods)})
			}
		}
	}
	return out
}

// contests are the state's contested devices: resource → device → claimant pods (two or
// more). Empty, as it almost always is, it costs the hot paths one length check.
type contests map[string]map[string]sets.Set[string]

// findContests rebuilds the contests from the assignments just restored. Only a device
// held more than once can be contested, so the pods are looked at only when one is.
func (s *State) findContests() {
	s.contested = nil
	var candidates map[string]sets.Set[string]
	for res, counts := range s.held {
		for id, n := range counts {
			if n > 1 {
				if candidates == nil {
					candidates = map[string]sets.Set[string]{}
				}
				if candidates[res] == nil {
					candidates[res] = sets.New[string]()
				}
				candidates[res].Insert(id)
			}
		}
	}
	if candidates == nil {
		return
	}
	claims := contests{}
	for podUID, containers := range s.pods {
		for _, resources := range containers {
			for res, a := range resources {
				if candidates[res].Len() == 0 {
					continue
				}
				a.eachID(func(id string) {
					if !candidates[res].Has(id) {
						return
					}
					if claims[res] == nil {
						claims[res] = map[string]sets.Set[string]{}
					}
					if claims[res][id] == nil {
						claims[res][id] = sets.New[string]()
					}
					claims[res][id].Insert(podUID)
				})
			}
		}
	}
	for res, ids := range claims {
		for id, pods := range ids {
			if pods.Len() < 2 {
				delete(ids, id)
			}
		}
		if len(ids) == 0 {
			delete(claims, res)
		}
	}
	if len(claims) > 0 {
		s.contested = claims
	}
}

// releaseClaims is called once a container of the pod stopped holding allocation a of res
// (dropped, or replaced by another): a device of a that no container of the pod holds any more
// loses the pod as a claimant, and a contest left with one claimant ends, that pod being
// recorded as settled (TakeSettled). Callers check that some device of res is contested.
func (s *State) releaseClaims(podUID, res string, a *Allocation) {
	ids := s.contested[res]
	a.eachID(func(id string) {
		pods := ids[id]
		if !pods.Has(podUID) || s.podHolds(podUID, res, id) {
			return
		}
		pods.Delete(podUID)
		if pods.Len() > 1 {
			return
		}
		delete(ids, id)
		for last := range pods {
			if s.settled == nil {
				s.settled = sets.New[string]()
			}
			s.settled.Insert(last)
		}
	})
	if len(ids) == 0 {
		delete(s.contested, res)
	}
}

// podHolds reports whether a container of the pod holds the device.
func (s *State) podHolds(podUID, res, id string) bool {
	for _, resources := range s.pods[podUID] {
		if a := resources[res]; a != nil && a.IDs().Has(id) {
			return true
		}
	}
	return false
}

// Contests returns every contested device, sorted by resource and device ID.
func (s *State) Contests() []Contest {
	var out []Contest
	for _, res := range SortedKeys(s.contested) {
		for _, id := range SortedKeys(s.contested[res]) {
			out = append(out, Contest{Resource: res, DeviceID: id, PodUIDs: sets.List(s.contested[res][id])})
		}
	}
	return out
}

// ContestsOf returns the contested devices the pod claims, sorted by resource and device ID.
func (s *State) ContestsOf(podUID string) []Contest {
	all := s.Contests()
	return slices.DeleteFunc(all, func(c Contest) bool { return !slices.Contains(c.PodUIDs, podUID) })
}

// TakeSettled returns, sorted, the pods whose contests ended since the last call (every other
// claimant of a device they hold is gone, so it is theirs alone again), and forgets them.
func (s *State) TakeSettled() []string {
	if s.settled.Len() == 0 {
		return nil
	}
	out := sets.List(s.settled)
	s.settled = nil
	return out
}

// Recover restores the owner's own record of the assignments (the embedder's records) in
// place of a checkpoint that is missing or unusable: every entry is restored whole, so a
// device that the records of several pods claim is contested (Contests) rather than dropped,
// and every resource the entries name becomes known with no device, its plugin away since
// now, as if the checkpoint had named it. The owner then writes the checkpoint. It returns
// the entries skipped because their AllocResp does not decode.
func (s *State) Recover(entries []checkpoint.PodDevicesEntry, now time.Time) (bad []checkpoint.PodDevicesEntry) {
	bad = s.Restore(&checkpoint.Data{PodDeviceEntries: entries}, nil, now)
	for _, res := range s.AllocatedResources() {
		s.AddRestored(res, now)
	}
	return bad
}

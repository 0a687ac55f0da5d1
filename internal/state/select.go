package state

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/sets"
)

// ErrNoHealthyDevices marks the refusal that deferred admission may wait out: the resource is
// known but has no healthy device.
var ErrNoHealthyDevices = errors.New("no healthy devices present")

// Request is one container's need of one resource.
type Request struct {
	PodUID, Container, Resource string
	// Required is the container's limit for the resource.
	Required int
	// Reusable are the devices of the pod's completed init containers it may take first.
	Reusable sets.Set[string]
	// SourcesReady: every pod source has delivered its pods. Until then a container found
	// running at start keeps its devices without any check (the restart bypass).
	SourcesReady bool
	// Hint is the container's NUMA affinity; the zero value means none.
	Hint TopologyHint
}

// PreferredFunc asks the resource's plugin which of available it prefers (GetPreferredAllocation),
// always including mustInclude, size devices in all. An empty set means no preference. The owner
// may release its lock during the call; Select re-checks what it gets against the state. The
// sets are the function's to read, not to change.
type PreferredFunc func(available, mustInclude sets.Set[string], size int) (sets.Set[string], error)

// Outcome says why Select returned no devices without an error.
type Outcome int

// Outcomes of Select.
const (
	// Picked: the returned devices are reserved for the container.
	Picked Outcome = iota
	// Cached: the container already holds what it asks for; nothing to allocate.
	Cached
	// KeptRunning: the container was running at start and sources are not ready: it keeps
	// its restored devices without any check.
	KeptRunning
)

// Select chooses and reserves the devices one container needs of one resource, with the
// kubelet's checks in the kubelet's order: a changed request, the restart bypass, the resource
// registered, at least one healthy device, the container's cached devices still healthy; then
// devices from the reuse pool, NUMA-aligned devices, the plugin's preference, the rest. The
// chosen devices are reserved: the caller Commits or Releases them. On error nothing is
// reserved. A nil preferred means the plugin offers no preference: nothing is asked, and
// nothing is copied for the asking.
func (s *State) Select(req Request, preferred PreferredFunc) (sets.Set[string], Outcome, error) {
	res := req.Resource
	needed := req.Required
	devices := s.ContainerDevices(req.PodUID, req.Container, res)
	if devices != nil {
		needed = req.Required - devices.Len()
		if needed != 0 {
			return nil, Picked, fmt.Errorf("pod %q container %q changed request for resource %q from %d to %d",
				req.PodUID, req.Container, res, devices.Len(), req.Required)
		}
	}
	if !req.SourcesReady && s.IsContainerAlreadyRunning(req.PodUID, req.Container) {
		return nil, KeptRunning, nil
	}
	r := s.resources[res]
	if r == nil || !r.hasSets() {
		return nil, Picked, fmt.Errorf("cannot allocate unregistered device %s", res)
	}
	if r.healthy.Len() == 0 {
		return nil, Picked, fmt.Errorf("%w; cannot allocate unhealthy devices %s", ErrNoHealthyDevices, res)
	}
	if !r.healthy.IsSuperset(devices) {
		return nil, Picked, fmt.Errorf("previously allocated devices are no longer healthy; cannot allocate unhealthy devices %s", res)
	}
	if needed == 0 {
		return nil, Cached, nil
	}

	chosen := sets.New[string]()
	// take reserves devices of ids (the smallest IDs first, for a deterministic choice among
	// equals) that are healthy now and not reserved or (unless mayBeHeld) held by anyone,
	// until the request is met. It reads the state afresh: the preference call may have
	// changed it.
	take := func(ids sets.Set[string], mayBeHeld bool) bool {
		eligible := func(id string) bool {
			if chosen.Has(id) || !s.isHealthy(res, id) || s.pending[res].Has(id) {
				return false
			}
			return mayBeHeld || !s.isAllocated(res, id)
		}
		for _, id := range smallestEligible(ids, needed, eligible) {
			chosen.Insert(id)
			s.reserve(res, id)
			needed--
		}
		return needed == 0
	}
	fail := func(err error) (sets.Set[string], Outcome, error) {
		s.release(res, chosen)
		return nil, Picked, err
	}

	if take(req.Reusable, true) {
		return chosen, Picked, nil
	}
	// Without a preference call the lock is held throughout: the kept set is read as is.
	available := s.available(res)
	if preferred != nil {
		available = available.Clone()
	}
	if available.Len() < needed {
		return fail(fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", res, needed, available.Len()))
	}
	aligned, unaligned, noAffinity := s.filterByAffinity(req.Hint, res, available)
	ask := func(avail sets.Set[string]) (sets.Set[string], error) {
		if preferred == nil {
			return nil, nil
		}
		if chosen.Len() > 0 {
			avail = avail.Union(chosen)
		}
		return preferred(avail, chosen.Clone(), req.Required)
	}
	if needed < aligned.Len() {
		pref, err := ask(aligned)
		if err != nil {
			return fail(err)
		}
		if take(pref.Intersection(aligned), false) || take(aligned, false) {
			return chosen, Picked, nil
		}
	} else {
		if take(aligned, false) {
			return chosen, Picked, nil
		}
		pref, err := ask(available)
		if err != nil {
			return fail(err)
		}
		if take(pref.Intersection(available), false) || take(unaligned, false) || take(noAffinity, false) {
			return chosen, Picked, nil
		}
	}
	return fail(fmt.Errorf("unexpectedly allocated less resources than required. Requested: %d, Got: %d", req.Required, req.Required-needed))
}

func (s *State) isHealthy(res, id string) bool {
	r := s.resources[res]
	return r != nil && r.healthy.Has(id)
}

// available returns the resource's healthy devices that nobody holds or has reserved: the set
// kept between calls (resource.free), to read only until the state changes.
func (s *State) available(res string) sets.Set[string] {
	r := s.resources[res]
	if r == nil {
		return sets.New[string]()
	}
	if r.free == nil {
		r.free = make(sets.Set[string], r.healthy.Len())
		for id := range r.healthy {
			if s.isFree(res, id) {
				r.free.Insert(id)
			}
		}
	}
	return r.free
}

// maxPartialPick is the largest number of devices smallestEligible picks by keeping the
// smallest candidates seen; beyond it, it sorts.
const maxPartialPick = 64

// smallestEligible returns, in ascending order, the n smallest IDs of ids that eligible
// accepts (fewer if there are not so many). eligible must not change the state. Picking a few
// devices out of a million costs one pass over them, not a sort.
func smallestEligible(ids sets.Set[string], n int, eligible func(string) bool) []string {
	if n <= 0 {
		return nil
	}
	if n > maxPartialPick || n*8 >= ids.Len() {
		var out []string
		for _, id := range sortedSet(ids) {
			if len(out) == n {
				break
			}
			if eligible(id) {
				out = append(out, id)
			}
		}
		return out
	}
	best := make([]string, 0, n) // sorted
	for id := range ids {
		if len(best) == n && id >= best[n-1] {
			continue
		}
		if !eligible(id) {
			continue
		}
		if len(best) == n {
			best = best[:n-1]
		}
		i, _ := slices.BinarySearch(best, id)
		best = slices.Insert(best, i, id)
	}
	return best
}

// isFree reports whether the device is healthy, not held and not reserved.
func (s *State) isFree(res, id string) bool {
	return s.isHealthy(res, id) && !s.isAllocated(res, id) && !s.pending[res].Has(id)
}

// reserve marks the device as picked by an allocation in flight.
func (s *State) reserve(res, id string) {
	if s.pending[res] == nil {
		s.pending[res] = sets.New[string]()
	}
	s.pending[res].Insert(id)
	s.refreshFree(res, id)
}

// refreshFree updates the resource's kept free set, if any, for a device whose hold or
// reservation just changed.
func (s *State) refreshFree(res, id string) {
	r := s.resources[res]
	if r == nil || r.free == nil {
		return
	}
	if s.isFree(res, id) {
		r.free.Insert(id)
	} else {
		r.free.Delete(id)
	}
}

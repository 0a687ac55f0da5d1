package explore

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kdm-project/kdm/internal/state"
)

// legacy reintroduces, in the simulator only, one of the ways it used to decide on its own
// where the core now decides for both drivers. Only tests set it, to show that the lockstep
// check catches each of them; the zero value is the simulator as it is.
var legacy struct {
	// completedFrees: a completed pod's devices are freed at once and a restart does not
	// admit it again (the manager keeps them and re-admits it).
	completedFrees bool
	// startAdds: `plugin start` on a running plugin adds an instance (the runner restarts it).
	startAdds bool
	// dropConflicts: recovery drops the records that name another pod's device (the manager
	// keeps every claim, contested).
	dropConflicts bool
	// deferralCopy: the deferred admission's wait is the simulator's own copy of the
	// manager's, as it was before state.Deferral.
	deferralCopy bool
}

// fate is state.Fate, or with legacy.completedFrees what the simulator used to decide.
func fate(end state.PodEnd) state.PodFate {
	if legacy.completedFrees {
		return state.PodFate{}
	}
	return state.Fate(end)
}

// legacyCopy is the simulator's former copy of the deferral wait, kept for legacy.deferralCopy.
type legacyCopy struct {
	until      time.Time
	wasStopped bool
}

// legacySelect is selectDevices as the simulator's former copy of the wait made it.
func (w *world) legacySelect(a *admission, req state.Request) (ids sets.Set[string], err error, waiting bool) {
	res := req.Resource
	if a.legacy != nil {
		if w.st.AwaitingPlugin(res, w.now, w.grace()) {
			if !w.now.Before(a.legacy.until) {
				a.wait, a.legacy = notWaiting, nil
				return nil, fmt.Errorf("%w; cannot allocate unhealthy devices %s (waited %v for the device plugin to register)",
					state.ErrNoHealthyDevices, res, w.policy.DeferAdmissionTimeout), false
			}
			return nil, nil, true
		}
		a.wait = notWaiting
	}
	ids, _, err = w.st.Select(req, w.preferred(res))
	if err != nil {
		if w.policy.DeferAdmission && errors.Is(err, state.ErrNoHealthyDevices) && w.st.AwaitingPlugin(res, w.now, w.grace()) {
			_, stopped := w.st.GraceLeft(res, w.now, w.grace())
			a.legacy = &legacyCopy{until: w.now.Add(w.policy.DeferAdmissionTimeout), wasStopped: stopped}
			a.wait, a.waitRes = waitNoHealthy, res
			a.pod.phase = podWaiting
			w.checkSourcesReady()
			return nil, nil, true
		}
		if a.legacy != nil && a.legacy.wasStopped && w.st.GraceOver(res, w.now, w.grace()) {
			err = fmt.Errorf("%w (the device plugin did not register again within the %v grace period; the resource is removed)", err, w.grace())
		}
		a.legacy = nil
		return nil, err, false
	}
	a.legacy = nil
	return ids, nil, false
}

// legacyWake is runnable's and wakeAt's view of a wait of the former copy: runnable once its
// plugin is not awaited or its deadline passed; it looks again at the deadline or the end of
// the grace period.
func (w *world) legacyWake(a *admission) (runnable bool, at time.Time) {
	at = a.legacy.until
	if left, away := w.st.GraceLeft(a.waitRes, w.now, w.grace()); away && w.now.Add(left).Before(at) {
		at = w.now.Add(left)
	}
	return !w.now.Before(a.legacy.until) || !w.st.AwaitingPlugin(a.waitRes, w.now, w.grace()), at
}

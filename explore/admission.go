package explore

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/state"
)

type waitKind int

const (
	notWaiting    waitKind = iota
	waitNoHealthy          // Policy.DeferAdmission: the resource's plugin is not back yet
	waitUnknown            // Policy.DeferAdmission: no plugin has registered the resource yet
)

// admission is one pod's admission in flight: its containers in order, each through the
// manager's own steps (state.ContainerSteps), one simulator step at a time. Each simulator
// step ends at a boundary where the manager may crash: after a selection, a plugin's
// Allocate, a resource passed over, a container's commit and checkpoint write, or the start
// of a wait.
type admission struct {
	pod     *simPod
	readmit bool                  // started by a restart
	ci      int                   // the container to do next
	steps   *state.ContainerSteps // the container's allocation; nil until its first step

	wait      waitKind
	waitRes   string
	waitUntil time.Time       // waitUnknown: the end of the window
	deferral  *state.Deferral // waitNoHealthy: the core's wait
	legacy    *legacyCopy     // waitNoHealthy under legacy.deferralCopy
}

func (a *admission) container() *simContainer { return &a.pod.containers[a.ci] }

// demands are the container's resources in name order; every simulated resource is an
// extended one.
func (a *admission) demands() []state.Demand {
	c := a.container()
	names := make([]string, 0, len(c.requests))
	for r := range c.requests {
		names = append(names, r)
	}
	sort.Strings(names)
	out := make([]state.Demand, 0, len(names))
	for _, r := range names {
		out = append(out, state.Demand{Resource: r, Required: c.requests[r], Awaitable: c.requests[r] > 0})
	}
	return out
}

// picks are the resources the admission's current container holds reservations of.
func (a *admission) picks() []*state.Pick {
	if a.steps == nil {
		return nil
	}
	return a.steps.Picks()
}

// runnable reports whether the admission can take a step now: it is not waiting, or the
// core's decision for its wait is no longer to sleep (a device change, its deadline).
func (w *world) runnable(a *admission) bool {
	switch {
	case a.wait == waitNoHealthy && a.legacy != nil:
		ok, _ := w.legacyWake(a)
		return ok
	}
	switch a.wait {
	case waitNoHealthy:
		return a.deferral.Next(w.st, w.now).Kind != state.WaitSleep
	case waitUnknown:
		return !w.awaitUnknown(a, a.waitRes).Wait
	}
	return true
}

// wakeAt returns when a waiting admission must look again without a device change.
func (w *world) wakeAt(a *admission) (time.Time, bool) {
	switch {
	case a.wait == waitNoHealthy && a.legacy != nil:
		_, at := w.legacyWake(a)
		return at, true
	}
	switch a.wait {
	case waitNoHealthy:
		if d := a.deferral.Next(w.st, w.now); d.Kind == state.WaitSleep {
			return d.Until, true
		}
	case waitUnknown:
		if u := w.awaitUnknown(a, a.waitRes); u.Wait {
			return u.Until, true
		}
	}
	return time.Time{}, false
}

func (w *world) grace() time.Duration { return gracePeriod }

// gracePeriod is the simulated manager's grace period, the kubelet's.
const gracePeriod = 5 * time.Minute

// step runs the admission's next simulator step: the container's steps, as the manager runs
// them, up to the next boundary.
func (w *world) step(a *admission) {
	p := a.pod
	if a.ci == len(p.containers) {
		w.admitted(a)
		return
	}
	c := a.container()
	if a.steps == nil {
		a.steps = w.st.NewContainerSteps(p.uid, c.name, c.regularInit, a.demands())
	}
	for {
		s := a.steps.Next(w.st)
		switch s.Kind {
		case state.StepDone:
			if s.Err != nil {
				w.reject(a, s.Resource, s.Err.Error())
				return
			}
			a.ci, a.steps = a.ci+1, nil
			return
		case state.StepPassOver:
			return
		case state.StepAwaitUnknown:
			u := w.awaitUnknown(a, s.Resource)
			if u.Wait {
				if a.wait != waitUnknown {
					a.wait, a.waitRes, a.waitUntil = waitUnknown, s.Resource, u.Until
					p.phase = podWaiting
					w.note("%s waiting for a device plugin to register %s", p.name, s.Resource)
					w.checkSourcesReady()
				}
				return
			}
			if a.wait == waitUnknown && !u.Served {
				w.note("%s: no plugin registered %s within the window; admitted without its devices", p.name, s.Resource)
			}
			a.wait = notWaiting
			a.steps.Served(u.Served, nil)
		case state.StepCollect:
			w.gc()
		case state.StepSelect:
			ids, err, waiting := w.selectDevices(a, s)
			if waiting {
				return
			}
			a.steps.Selected(ids, err)
			if err == nil {
				return
			}
		case state.StepAllocate:
			err := w.allocate(s.Pick)
			a.steps.Allocated(err)
			if err == nil {
				return
			}
		case state.StepWrite:
			w.writeCheckpoint()
			a.steps.Written(nil)
		}
	}
}

// selectDevices is devicesToAllocateWithDeferral: Select, and a wait for a plugin that is not
// back yet, each of its steps as the core decides (state.Rules.Defer, state.Deferral). It
// reports waiting when the admission waits now.
func (w *world) selectDevices(a *admission, s state.Step) (ids sets.Set[string], err error, waiting bool) {
	p, c, res := a.pod, a.container(), s.Resource
	req := state.Request{PodUID: p.uid, Container: c.name, Resource: res, Required: s.Required,
		Reusable: s.Reusable, SourcesReady: w.sourcesReady}
	if legacy.deferralCopy {
		return w.legacySelect(a, req)
	}
	if d := a.deferral; d != nil {
		switch wt := d.Next(w.st, w.now); wt.Kind {
		case state.WaitSleep:
			return nil, nil, true
		case state.WaitFail:
			a.wait, a.deferral = notWaiting, nil
			return nil, wt.Err, false
		}
		a.wait, a.deferral = notWaiting, nil
		ids, _, err = w.st.Select(req, w.preferred(res))
		return ids, d.Retried(w.st, err, w.now), false
	}
	ids, _, err = w.st.Select(req, w.preferred(res))
	if err == nil {
		return ids, nil, false
	}
	d := w.rules.Defer(w.st, res, err, w.now)
	if d == nil {
		return nil, err, false
	}
	d.Next(w.st, w.now) // as the manager asks before its first sleep
	a.wait, a.waitRes, a.deferral = waitNoHealthy, res, d
	p.phase = podWaiting
	w.note("%s waiting for its device plugin (deferred admission)", p.name)
	w.checkSourcesReady()
	return nil, nil, true
}

// awaitUnknown is the core's decision for a container asking for a resource no plugin has
// registered (awaitUnknownResource).
func (w *world) awaitUnknown(a *admission, res string) state.UnknownWait {
	bypass := !w.sourcesReady && w.st.IsContainerAlreadyRunning(a.pod.uid, a.container().name)
	return w.rules.AwaitUnknown(w.st, res, w.startedAt, w.now, bypass)
}

// preferred is the plugin's GetPreferredAllocation as the manager calls it: only when the
// plugin offers it; a failure is the pod's unless Policy.PreferredAllocationFallback. The
// simulated plugin prefers the highest IDs, so that its choice differs from the manager's.
func (w *world) preferred(res string) state.PreferredFunc {
	return func(available, mustInclude sets.Set[string], size int) (sets.Set[string], error) {
		p := w.pluginServing(res)
		if p == nil || !p.faults.PreferredAvailable {
			return sets.New[string](), nil
		}
		if p.faults.FailPreferred {
			if w.policy.PreferredAllocationFallback {
				return sets.New[string](), nil
			}
			return nil, errors.New("device plugin GetPreferredAllocation rpc failed with err: rpc error: code = Unknown desc = injected failure")
		}
		out := mustInclude.Clone()
		ids := sets.List(available)
		for i := len(ids) - 1; i >= 0 && out.Len() < size; i-- {
			out.Insert(ids[i])
		}
		return out, nil
	}
}

// pluginServing returns the live plugin one of whose open registrations is the resource's
// current one.
func (w *world) pluginServing(res string) *simPlugin {
	for _, p := range w.plugins {
		if p.resource() == res && p.alive && p.isOpen(w.current[res]) {
			return p
		}
	}
	return nil
}

// allocate is the plugin's Allocate as callAllocate makes it.
func (w *world) allocate(pk *state.Pick) error {
	p := w.pluginServing(pk.Resource)
	if p == nil {
		return fmt.Errorf("rpc error: code = Unavailable desc = the device plugin of %s is not running", pk.Resource)
	}
	devs, missing, ok := w.st.DevicesPerNUMA(pk.Resource, pk.IDs)
	if !ok {
		return fmt.Errorf("device %s of resource %s is no longer reported by its plugin", missing, pk.Resource)
	}
	if p.faults.FailAllocate {
		return errors.New("rpc error: code = Unknown desc = injected Allocate failure")
	}
	pk.Devices = devs
	pk.Response = &pluginapi.ContainerAllocateResponse{Envs: map[string]string{
		"KDM_DEVICES":  sortedIDs(pk.IDs),
		"KDM_INSTANCE": fmt.Sprint(w.current[pk.Resource]),
	}}
	return nil
}

// admitted finishes the admission: the pod runs, and the embedder records its assignments.
func (w *world) admitted(a *admission) {
	p := a.pod
	before := p.given
	wasRunning := p.running
	p.phase, p.running, p.admittedGen, p.reason = podAdmitted, !p.completed, w.gen, ""
	p.given = map[string]map[string]grant{}
	p.records = nil
	for _, c := range p.containers {
		allocs := w.st.Allocations(p.uid, c.name)
		if len(allocs) > 0 {
			g := map[string]grant{}
			for res, al := range allocs {
				g[res] = grant{ids: sortedIDs(al.IDs()), resp: respFingerprint(al.Response())}
			}
			p.given[c.name] = g
		}
		p.records = append(p.records, w.st.ContainerEntries(p.uid, c.name)...)
		if !wasRunning || w.late != nil {
			continue
		}
		for res, g := range before[c.name] {
			if now := p.given[c.name][res]; now.ids != g.ids {
				w.late = &Violation{Invariant: KeepsAssignment, Detail: fmt.Sprintf("running %s/%s was re-admitted with %s %q, it started with %s", p.name, c.name, res, now.ids, g.ids)}
			}
		}
	}
	w.note("%s admitted", p.name)
	w.removeAdmission(a)
}

// reject ends the admission with the pod rejected; its steps have released what they held.
func (w *world) reject(a *admission, res, reason string) {
	p := a.pod
	msg := "UnexpectedAdmissionError: Allocate failed due to " + reason + ", which is unexpected"
	heldBefore := false
	for _, g := range p.given {
		if _, ok := g[res]; ok {
			heldBefore = true
		}
	}
	// A rejection made once the plugin is back and has listed its devices is about the
	// devices, not the restart.
	back := false
	if sp := w.pluginServing(res); sp != nil && sp.listed {
		back = true
	}
	if p.admittedGen != 0 && p.admittedGen < w.gen && heldBefore && !back {
		w.rejections = append(w.rejections, rejection{pod: p.name, container: a.container().name, regularInit: a.container().regularInit,
			resource: res, reason: msg, restart: w.restarts[w.gen], reboot: w.rebooted, completed: p.completed})
	}
	// A plugin's failed RPC is the plugin's refusal; a device that vanished between the
	// selection and Allocate fails the pod under every policy (no policy chooses again).
	if w.needless == nil && !strings.Contains(reason, "rpc error") && !strings.Contains(reason, "is no longer reported by its plugin") {
		c := a.container()
		// What the plugin's connected instances list, whichever of them the manager serves.
		free := sets.New[string]()
		if sp := w.plugins[strings.TrimPrefix(res, domain)]; sp != nil && sp.alive && len(sp.open) > 0 && sp.listed {
			for _, d := range sp.devices {
				if d.Health == pluginapi.Healthy {
					free.Insert(d.ID)
				}
			}
		}
		free = free.Difference(w.st.Allocated(res))
		free.Delete(w.st.ReservedIDs(res)...)
		// A container that holds devices of res already is refused over those devices'
		// health (the kubelet's rule, and kdm's), not for want of free ones.
		_, held := p.given[c.name][res]
		held = held || w.st.ContainerDevices(p.uid, c.name, res) != nil
		if !held && c.requests[res] > 0 && free.Len() >= c.requests[res] {
			w.needless = &Violation{Invariant: NoNeedlessRejection, Detail: fmt.Sprintf("%s was rejected (%s) while its plugin's connected instances list %d free healthy %s devices and %s/%s asks for %d",
				p.name, msg, free.Len(), res, p.name, c.name, c.requests[res])}
		}
	}
	p.phase, p.running, p.reason = podRejected, false, msg
	w.note("%s rejected: %s", p.name, msg)
	w.removeAdmission(a)
}

func (w *world) removeAdmission(a *admission) {
	for i, x := range w.admissions {
		if x == a {
			w.admissions = append(w.admissions[:i], w.admissions[i+1:]...)
			break
		}
	}
	w.checkSourcesReady()
}

// checkSourcesReady marks the pod sources ready once every re-admission of a restart has
// finished or waits, and garbage-collects then, as the agent does.
func (w *world) checkSourcesReady() {
	if w.sourcesReady {
		return
	}
	for _, a := range w.admissions {
		if a.readmit && a.wait == notWaiting {
			return
		}
	}
	w.sourcesReady = true
	w.gc()
}

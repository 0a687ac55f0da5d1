package explore

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager/state"
)

type stage int

const (
	stageSelect   stage = iota // choose and reserve the next resource's devices
	stageAllocate              // ask the plugin to allocate the last pick
	stageCommit                // record the container's picks and write the checkpoint
)

// pick is one resource's reserved devices, and once the plugin answered, its answer.
type pick struct {
	resource string
	ids      sets.Set[string]
	devices  checkpoint.DevicesPerNUMA
	resp     *pluginapi.ContainerAllocateResponse
}

type waitKind int

const (
	notWaiting    waitKind = iota
	waitNoHealthy          // Policy.DeferAdmission: the resource's plugin is not back yet
	waitUnknown            // Policy.DeferAdmission: no plugin has registered the resource yet
)

// admission is one pod's admission in flight: its containers in order, one step at a time,
// as Manager.Allocate runs them. Each step ends at a boundary where the manager may crash.
type admission struct {
	pod     *simPod
	readmit bool // started by a restart
	ci, ri  int  // container, and resource within it (sorted), to do next
	stage   stage
	reuse   map[string]sets.Set[string]
	gcDone  bool
	picks   []*pick

	wait       waitKind
	waitRes    string
	waitUntil  time.Time
	wasStopped bool
}

func (a *admission) container() *simContainer { return &a.pod.containers[a.ci] }

func (a *admission) resources() []string {
	c := a.container()
	out := make([]string, 0, len(c.requests))
	for r := range c.requests {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// runnable reports whether the admission can take a step now: it is not waiting, or what it
// waits for has happened (a device change, its deadline).
func (w *world) runnable(a *admission) bool {
	switch a.wait {
	case waitNoHealthy:
		return !w.now.Before(a.waitUntil) || !w.st.AwaitingPlugin(a.waitRes, w.now, w.grace())
	case waitUnknown:
		return !w.now.Before(a.waitUntil) || w.served(a.waitRes)
	}
	return true
}

func (w *world) grace() time.Duration { return gracePeriod }

// gracePeriod is the simulated manager's grace period, the kubelet's.
const gracePeriod = 5 * time.Minute

func (w *world) served(res string) bool {
	return w.st.IsDevicePluginResource(res) && !w.st.AwaitingPlugin(res, w.now, w.grace())
}

// step runs the admission's next step.
func (w *world) step(a *admission) {
	p := a.pod
	if a.ci == len(p.containers) {
		w.admitted(a)
		return
	}
	switch a.stage {
	case stageSelect:
		w.stepSelect(a)
	case stageAllocate:
		w.stepAllocate(a)
	case stageCommit:
		w.stepCommit(a)
	}
}

func (w *world) stepSelect(a *admission) {
	p, c := a.pod, a.container()
	resources := a.resources()
	if a.ri == 0 && a.reuse == nil {
		a.reuse = w.st.ReusePool(p.uid)
	}
	if a.ri == len(resources) {
		a.stage = stageCommit
		w.stepCommit(a)
		return
	}
	res := resources[a.ri]
	if a.wait == waitUnknown {
		if !w.served(res) {
			a.wait = notWaiting
			w.note("%s: no plugin registered %s within the window; admitted without its devices", p.name, res)
			a.ri++
			return
		}
		a.wait = notWaiting
	} else if !w.st.IsDevicePluginResource(res) && c.requests[res] > 0 {
		if w.waitForUnknown(a, res) {
			return
		}
		if !w.st.IsDevicePluginResource(res) {
			a.ri++
			return
		}
	}
	if !w.st.IsDevicePluginResource(res) {
		a.ri++
		return
	}
	if !a.gcDone {
		w.gc()
		a.gcDone = true
	}
	if a.wait == waitNoHealthy {
		if w.st.AwaitingPlugin(res, w.now, w.grace()) {
			if !w.now.Before(a.waitUntil) {
				w.reject(a, res, fmt.Sprintf("%v; cannot allocate unhealthy devices %s (waited %v for the device plugin to register)",
					state.ErrNoHealthyDevices, res, w.policy.DeferAdmissionTimeout))
			}
			return
		}
		a.wait = notWaiting
	}
	req := state.Request{PodUID: p.uid, Container: c.name, Resource: res, Required: c.requests[res],
		Reusable: a.reuse[res], SourcesReady: w.sourcesReady}
	ids, _, err := w.st.Select(req, w.preferred(res))
	if err != nil {
		if w.policy.DeferAdmission && errors.Is(err, state.ErrNoHealthyDevices) && w.st.AwaitingPlugin(res, w.now, w.grace()) {
			a.wait, a.waitRes, a.waitUntil = waitNoHealthy, res, w.now.Add(w.policy.DeferAdmissionTimeout)
			_, stopped := w.st.GraceLeft(res, w.now, w.grace())
			a.wasStopped = a.wasStopped || stopped
			p.phase = podWaiting
			w.note("%s waiting for its device plugin (deferred admission)", p.name)
			return
		}
		if a.wasStopped && w.st.GraceOver(res, w.now, w.grace()) {
			err = fmt.Errorf("%w (the device plugin did not register again within the %v grace period; the resource is removed)", err, w.grace())
		}
		w.reject(a, res, err.Error())
		return
	}
	if ids.Len() == 0 {
		a.ri++
		return
	}
	a.picks = append(a.picks, &pick{resource: res, ids: ids})
	a.stage = stageAllocate
}

// waitForUnknown is awaitUnknownResource: with DeferAdmission, a container asking for a
// resource nobody registered waits while the manager is young. It reports whether the
// admission now waits.
func (w *world) waitForUnknown(a *admission, res string) bool {
	if !w.policy.DeferAdmission {
		return false
	}
	if !w.sourcesReady && w.st.IsContainerAlreadyRunning(a.pod.uid, a.container().name) {
		return false
	}
	deadline := w.startedAt.Add(w.policy.DeferAdmissionTimeout)
	if !w.now.Before(deadline) || w.served(res) {
		return false
	}
	a.wait, a.waitRes, a.waitUntil = waitUnknown, res, deadline
	a.pod.phase = podWaiting
	w.note("%s waiting for a device plugin to register %s", a.pod.name, res)
	return true
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

func (w *world) stepAllocate(a *admission) {
	pk := a.picks[len(a.picks)-1]
	p := w.pluginServing(pk.resource)
	if p == nil {
		w.reject(a, pk.resource, fmt.Sprintf("rpc error: code = Unavailable desc = the device plugin of %s is not running", pk.resource))
		return
	}
	devs, missing, ok := w.st.DevicesPerNUMA(pk.resource, pk.ids)
	if !ok {
		w.reject(a, pk.resource, fmt.Sprintf("device %s of resource %s is no longer reported by its plugin", missing, pk.resource))
		return
	}
	if p.faults.FailAllocate {
		w.reject(a, pk.resource, "rpc error: code = Unknown desc = injected Allocate failure")
		return
	}
	pk.devices = devs
	pk.resp = &pluginapi.ContainerAllocateResponse{Envs: map[string]string{
		"KDM_DEVICES":  sortedIDs(pk.ids),
		"KDM_INSTANCE": fmt.Sprint(w.current[pk.resource]),
	}}
	a.ri++
	a.stage = stageSelect
}

func (w *world) stepCommit(a *admission) {
	p, c := a.pod, a.container()
	if len(a.picks) > 0 {
		for _, pk := range a.picks {
			w.st.Commit(p.uid, c.name, pk.resource, pk.ids, pk.devices, pk.resp)
		}
		w.writeCheckpoint()
	}
	w.st.ContainerAllocated(p.uid, c.name, c.regularInit)
	a.picks = nil
	a.ci, a.ri, a.stage, a.reuse, a.gcDone = a.ci+1, 0, stageSelect, nil, false
}

// admitted finishes the admission: the pod runs, and the embedder records its assignments.
func (w *world) admitted(a *admission) {
	p := a.pod
	before := p.given
	wasRunning := p.running
	p.phase, p.running, p.admittedGen, p.reason = podAdmitted, true, w.gen, ""
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

func (w *world) reject(a *admission, res, reason string) {
	for _, pk := range a.picks {
		w.st.Release(pk.resource, pk.ids)
	}
	a.picks = nil
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
			resource: res, reason: msg, restart: w.restarts[w.gen], reboot: w.rebooted})
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

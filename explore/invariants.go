package explore

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/internal/state"
)

// Invariant names a property checked after every step.
type Invariant string

// The invariants.
const (
	// NoSharedDevice: no device is assigned to two live containers (a regular init
	// container shares with its own pod's later containers, by design).
	NoSharedDevice Invariant = "shared-device"
	// KeepsAssignment: a running container never loses or changes its assignment, across
	// restarts included.
	KeepsAssignment Invariant = "lost-assignment"
	// NoRejectionAfterRestart: a pod admitted before a restart is not rejected at its
	// re-admission when its plugin comes back within the deferral window.
	NoRejectionAfterRestart Invariant = "rejected-after-restart"
	// CheckpointRestores: the checkpoint on disk always decodes in the kubelet's format and
	// holds the assignments of the running containers.
	CheckpointRestores Invariant = "checkpoint"
	// CapacityMatchesPlugins: capacity and allocatable count each device once and match the
	// plugins' lists.
	CapacityMatchesPlugins Invariant = "capacity"
	// RunOptionsFromPlugin: every admitted container's recorded Allocate answer is the one its
	// plugin gave.
	RunOptionsFromPlugin Invariant = "run-options"
	// NoReservationLeak: no device stays reserved when no allocation is in flight.
	NoReservationLeak Invariant = "reservation-leak"
	// NoNeedlessRejection: no pod is rejected for a resource while a connected plugin
	// lists enough free healthy devices of it (the manager's own refusal, not a plugin's
	// failed RPC).
	NoNeedlessRejection Invariant = "needless-rejection"
	// DeletedPodFreed: once the pod sources are ready, a deleted pod holds no device.
	DeletedPodFreed Invariant = "deleted-pod-holds-devices"
	// DeferralEnds: every admission waiting for a plugin has a deadline ahead, within the
	// deferral timeout, so it ends.
	DeferralEnds Invariant = "endless-deferral"
)

// Violation is a broken invariant, with what broke it.
type Violation struct {
	Invariant Invariant
	Detail    string
	// Class groups violations of one cause: the invariant, and for the known upstream
	// failures the issue that describes it.
	Class string
}

func (v Violation) Error() string { return fmt.Sprintf("%s: %s", v.Invariant, v.Detail) }

// check returns the first broken invariant, or nil.
func (w *world) check() *Violation {
	if v := w.late; v != nil {
		return classified(v)
	}
	for _, f := range []func() *Violation{w.checkShared, w.checkAssignments, w.checkRejections,
		w.checkNeedless, w.checkCheckpoint, w.checkCapacity, w.checkRunOptions, w.checkReservations,
		w.checkDeletedFreed, w.checkDeferralsEnd} {
		if v := f(); v != nil {
			return classified(v)
		}
	}
	return nil
}

func classified(v *Violation) *Violation {
	if v.Class == "" {
		v.Class = string(v.Invariant)
	}
	return v
}

func (w *world) checkShared() *Violation {
	type holder struct{ pod, container string }
	owners := map[string]map[string][]holder{} // resource → device → holders
	// A contested device (restored records of several pods name it, state.Contest) is held
	// by every claimant on purpose and given to no other pod.
	contested := map[string]bool{}
	for _, c := range w.st.Contests() {
		contested[c.Resource+"/"+c.DeviceID] = true
	}
	var v *Violation
	w.st.EachAllocation(func(uid, ctr, res string, a *state.Allocation) {
		p := w.podByUID(uid)
		if v != nil || p == nil || !p.active() {
			return
		}
		if owners[res] == nil {
			owners[res] = map[string][]holder{}
		}
		for id := range a.IDs() {
			if contested[res+"/"+id] {
				continue
			}
			for _, h := range owners[res][id] {
				if h.pod == p.name && (w.isRegularInit(p, h.container) || w.isRegularInit(p, ctr)) {
					continue
				}
				v = &Violation{Invariant: NoSharedDevice, Detail: fmt.Sprintf("%s %s is held by %s/%s and %s/%s", res, id, h.pod, h.container, p.name, ctr)}
				return
			}
			owners[res][id] = append(owners[res][id], holder{p.name, ctr})
		}
	})
	return v
}

func (w *world) isRegularInit(p *simPod, ctr string) bool {
	for _, c := range p.containers {
		if c.name == ctr {
			return c.regularInit
		}
	}
	return false
}

// eachRunningGrant calls check for every grant a running container started with, in pod
// arrival, container and resource order, and returns the first violation.
func (w *world) eachRunningGrant(check func(p *simPod, ctr, res string, g grant) *Violation) *Violation {
	for _, name := range w.order {
		p := w.pods[name]
		if !p.running || !p.live() {
			continue
		}
		for _, c := range p.containers {
			for _, res := range state.SortedKeys(p.given[c.name]) {
				if v := check(p, c.name, res, p.given[c.name][res]); v != nil {
					return v
				}
			}
		}
	}
	return nil
}

func (w *world) checkAssignments() *Violation {
	return w.eachRunningGrant(func(p *simPod, ctr, res string, g grant) *Violation {
		got := w.st.ContainerDevices(p.uid, ctr, res)
		switch {
		case got == nil:
			return &Violation{Invariant: KeepsAssignment, Detail: fmt.Sprintf("running %s/%s lost its %s %s", p.name, ctr, res, g.ids)}
		case sortedIDs(got) != g.ids:
			return &Violation{Invariant: KeepsAssignment, Detail: fmt.Sprintf("running %s/%s holds %s %s, started with %s", p.name, ctr, res, sortedIDs(got), g.ids)}
		}
		return nil
	})
}

func (w *world) checkRejections() *Violation {
	for _, r := range w.rejections {
		back := w.pluginBackWith(r.resource, w.pods[r.pod].heldOf(r.resource))
		if back && w.now.Before(r.restart.Add(w.deferralWindow())) {
			v := &Violation{Invariant: NoRejectionAfterRestart, Detail: fmt.Sprintf("%s was admitted before the restart and rejected at its re-admission (%s); its plugin was back %v after the restart",
				r.pod, r.reason, w.now.Sub(r.restart))}
			switch {
			case r.completed:
				v.Class = string(NoRejectionAfterRestart) + " (kubernetes #117955: a completed pod admitted again after a restart)"
			case r.regularInit && !r.reboot:
				v.Class = string(NoRejectionAfterRestart) + " (kubernetes #138446: a completed init container checked again after a kubelet restart)"
			case strings.Contains(r.reason, "cannot allocate unregistered device"):
				v.Class = string(NoRejectionAfterRestart) + " (a resource removed after its grace period is unknown after a restart)"
			case strings.Contains(r.reason, "no healthy devices present"):
				v.Class = string(NoRejectionAfterRestart) + " (kubernetes #125579: re-admitted before its plugin re-registered)"
			}
			return v
		}
	}
	return nil
}

// pluginBackWith reports whether the resource's plugin is registered again and lists every
// one of ids as healthy.
func (w *world) pluginBackWith(res string, ids sets.Set[string]) bool {
	p := w.pluginServing(res)
	return p != nil && p.listed && w.st.Healthy(res).IsSuperset(ids)
}

func (w *world) checkCheckpoint() *Violation {
	if w.diskTampered || (w.disk == nil && w.written == nil) {
		return nil
	}
	var data *checkpoint.Data
	if w.written != nil {
		// Written since the file was last read: its content, without the encoding and
		// decoding (package checkpoint's tests hold those to the kubelet's format).
		data = w.written.Data()
	} else {
		d, layout, err := checkpoint.Decode(w.disk)
		if err != nil || layout != checkpoint.LayoutV2 {
			return &Violation{Invariant: CheckpointRestores, Detail: fmt.Sprintf("the checkpoint does not decode: layout %v, %v", layout, err)}
		}
		data = d
	}
	if w.busy() {
		return nil
	}
	onDisk := map[string]string{}
	for _, e := range data.PodDeviceEntries {
		ids := sets.New[string]()
		for _, l := range e.DeviceIDs {
			ids.Insert(l...)
		}
		onDisk[e.PodUID+"/"+e.ContainerName+"/"+e.ResourceName] = sortedIDs(ids)
	}
	return w.eachRunningGrant(func(p *simPod, ctr, res string, g grant) *Violation {
		if got, ok := onDisk[p.uid+"/"+ctr+"/"+res]; !ok || got != g.ids {
			return &Violation{Invariant: CheckpointRestores, Detail: fmt.Sprintf("the checkpoint would restore %s/%s %s as %q, it runs with %s", p.name, ctr, res, got, g.ids)}
		}
		return nil
	})
}

func (w *world) checkCapacity() *Violation {
	for _, res := range w.st.Listed() {
		healthy, unhealthy := w.st.Healthy(res), w.st.Unhealthy(res)
		if both := healthy.Intersection(unhealthy); both.Len() > 0 {
			return &Violation{Invariant: CapacityMatchesPlugins, Detail: fmt.Sprintf("%s counts %v as healthy and unhealthy", res, sets.List(both))}
		}
		ps := w.st.Plugin(res)
		p := w.pluginServing(res)
		if !ps.Connected || p == nil {
			// Disconnected, or connected to an instance no live plugin process serves.
			if healthy.Len() > 0 {
				return &Violation{Invariant: CapacityMatchesPlugins, Detail: fmt.Sprintf("%s has no live plugin (connected: %v) but %d allocatable devices", res, ps.Connected, healthy.Len())}
			}
			continue
		}
		if p == nil || !ps.Listed || !p.listed {
			continue
		}
		// A repeated ID counts once, unhealthy if any of its entries says so.
		wantAll, sick := sets.New[string](), sets.New[string]()
		for _, d := range p.devices {
			wantAll.Insert(d.ID)
			if d.Health != pluginapi.Healthy {
				sick.Insert(d.ID)
			}
		}
		wantHealthy := wantAll.Difference(sick)
		if !healthy.Union(unhealthy).Equal(wantAll) || !healthy.Equal(wantHealthy) {
			return &Violation{Invariant: CapacityMatchesPlugins, Detail: fmt.Sprintf("%s reports healthy %v unhealthy %v; its plugin lists %v, healthy %v",
				res, sets.List(healthy), sets.List(unhealthy), sets.List(wantAll), sets.List(wantHealthy))}
		}
	}
	return nil
}

func (w *world) checkRunOptions() *Violation {
	return w.eachRunningGrant(func(p *simPod, ctr, res string, g grant) *Violation {
		a := w.st.Allocations(p.uid, ctr)[res]
		switch {
		case a == nil:
			return nil // reported as a lost assignment
		case respFingerprint(a.Response()) != g.resp:
			return &Violation{Invariant: RunOptionsFromPlugin, Detail: fmt.Sprintf("%s/%s %s runs with %q, its plugin answered %q", p.name, ctr, res, respFingerprint(a.Response()), g.resp)}
		case !strings.Contains(g.resp, "KDM_DEVICES="+g.ids+";"):
			return &Violation{Invariant: RunOptionsFromPlugin, Detail: fmt.Sprintf("%s/%s %s holds %s but its plugin's answer was for %q", p.name, ctr, res, g.ids, g.resp)}
		}
		return nil
	})
}

func (w *world) checkReservations() *Violation {
	if !w.busy() && w.st.Reservations() > 0 {
		return &Violation{Invariant: NoReservationLeak, Detail: fmt.Sprintf("%d devices reserved with no allocation in flight", w.st.Reservations())}
	}
	return nil
}

// checkNeedless reports a rejection recorded as needless (see reject).
func (w *world) checkNeedless() *Violation { return w.needless }

func (w *world) checkDeletedFreed() *Violation {
	if !w.sourcesReady {
		return nil
	}
	for _, name := range w.order {
		if p := w.pods[name]; p.phase == podDeleted && w.st.HasPod(p.uid) {
			return &Violation{Invariant: DeletedPodFreed, Detail: fmt.Sprintf("deleted %s still holds devices once the pod sources are ready", name)}
		}
	}
	return nil
}

func (w *world) checkDeferralsEnd() *Violation {
	for _, a := range w.admissions {
		if a.wait == notWaiting || w.runnable(a) {
			continue
		}
		at, ok := w.wakeAt(a)
		if !ok || !at.After(w.now) || at.After(w.now.Add(w.policy.DeferAdmissionTimeout)) {
			return &Violation{Invariant: DeferralEnds, Detail: fmt.Sprintf("%s waits for %s with no deadline within %v (next look: %v, %v)",
				a.pod.name, a.waitRes, w.policy.DeferAdmissionTimeout, ok, at.Sub(w.now))}
		}
	}
	return nil
}

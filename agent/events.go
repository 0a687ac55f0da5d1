package agent

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/devicemanager"
)

// maxEvents bounds the timeline; older events are dropped.
const maxEvents = 200

// maxHealthEvents bounds the per-device health events one observation adds; the rest are
// summed up in one more event.
const maxHealthEvents = 8

// podWait is what a waiting pod waits for.
type podWait struct {
	Container string
	Resource  string
	Deadline  time.Time
}

// eventLog keeps the timeline of recent events and the little history the status page needs
// beyond the manager's and the agent's current state: which resources were removed and when,
// and what each waiting pod waits for. It learns pod outcomes from the agent's calls and
// endpoint and device changes by comparing successive manager snapshots (observe).
//
// It is safe for concurrent use; its mutex is its own and is never held while calling out.
type eventLog struct {
	now func() time.Time

	mu      sync.Mutex
	events  []statusapi.Event // ring of at most maxEvents
	next    int               // where the next event goes once the ring is full
	changed chan struct{}

	phases    map[types.UID]string
	conflicts map[types.UID]string // the last ConflictWarning recorded for each pod, if any
	waits     map[types.UID]podWait
	endpoints map[string]devicemanager.EndpointView // last observed, per resource
	health    map[string]map[string]string          // last observed, resource → device → health
	removed   map[string]time.Time                  // removed resources, until they come back
}

func newEventLog(now func() time.Time) *eventLog {
	return &eventLog{
		now:       now,
		changed:   make(chan struct{}),
		phases:    map[types.UID]string{},
		conflicts: map[types.UID]string{},
		waits:     map[types.UID]podWait{},
		endpoints: map[string]devicemanager.EndpointView{},
		health:    map[string]map[string]string{},
		removed:   map[string]time.Time{},
	}
}

// changes returns a channel closed at the next change of the log.
func (l *eventLog) changes() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// addLocked appends e, stamped now, and wakes the waiters. Callers hold mu.
func (l *eventLog) addLocked(e statusapi.Event) {
	if e.Time.IsZero() {
		e.Time = l.now()
	}
	if len(l.events) < maxEvents {
		l.events = append(l.events, e)
	} else {
		l.events[l.next] = e
		l.next = (l.next + 1) % maxEvents
	}
	l.signalLocked()
}

// touch wakes the waiters without an event: something else the page shows changed.
func (l *eventLog) touch() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.signalLocked()
}

func (l *eventLog) signalLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// recent returns the timeline, newest first.
func (l *eventLog) recent() []statusapi.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]statusapi.Event, 0, len(l.events))
	for i := len(l.events) - 1; i >= 0; i-- {
		out = append(out, l.events[(l.next+i)%len(l.events)])
	}
	return out
}

// started records the agent's start; restored is how many containers of an earlier run keep
// their devices.
func (l *eventLog) started(restored int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	msg := "kdm started"
	if restored > 0 {
		msg = fmt.Sprintf("kdm restarted; %d containers of the previous run keep their devices", restored)
	}
	l.addLocked(statusapi.Event{Kind: statusapi.EventStarted, Message: msg})
}

// podRecorded notes a pod's recorded result; a change of phase makes an event.
func (l *eventLog) podRecorded(r *podresult.PodResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Phase != podresult.PhasePending {
		delete(l.waits, r.UID)
	}
	l.conflictsRecordedLocked(r)
	if l.phases[r.UID] == r.Phase {
		return
	}
	l.phases[r.UID] = r.Phase
	e := statusapi.Event{Pod: r.Namespace + "/" + r.Name}
	switch r.Phase {
	case podresult.PhaseAdmitted:
		e.Kind, e.Message = statusapi.EventAdmitted, "admitted"+devicesSummary(r)
	case podresult.PhasePending:
		e.Kind, e.Message = statusapi.EventWaiting, r.Message
		if w, ok := l.waits[r.UID]; ok {
			// The result's message names the deadline in RFC 3339; the event says it in
			// words, and the page counts down to Deadline.
			deadline := w.Deadline.UTC()
			e.Resource, e.Deadline = w.Resource, &deadline
			e.Message = fmt.Sprintf("container %q waits for the device plugin of %s to register", w.Container, w.Resource)
		}
	case podresult.PhaseRejected:
		e.Kind, e.Message = statusapi.EventRejected, r.Reason+": "+r.Message
	default:
		e.Kind, e.Message = r.Phase, r.Message
	}
	l.addLocked(e)
}

// conflictsRecordedLocked makes an event when the pod's conflicts (podresult.PodResult.Conflicts)
// appear, change or end. Callers hold mu.
func (l *eventLog) conflictsRecordedLocked(r *podresult.PodResult) {
	w := r.ConflictWarning()
	prev, had := l.conflicts[r.UID]
	if w == prev {
		return
	}
	e := statusapi.Event{Kind: statusapi.EventConflict, Pod: r.Namespace + "/" + r.Name, Message: w}
	if w == "" {
		delete(l.conflicts, r.UID)
		if !had {
			return
		}
		e.Message = "contested devices are this pod's alone again"
	} else {
		l.conflicts[r.UID] = w
	}
	if len(r.Conflicts) > 0 {
		e.Resource = r.Conflicts[0].Resource
	}
	l.addLocked(e)
}

// devicesSummary says how many devices the pod holds, as " with 2 × nvidia.com/gpu": the
// distinct devices per resource across its containers, since an init container's devices go
// on to the containers after it.
func devicesSummary(r *podresult.PodResult) string {
	per := map[string]map[string]bool{}
	var order []string
	for _, c := range r.Containers {
		for res, ids := range c.Devices() {
			if per[res] == nil {
				per[res] = map[string]bool{}
				order = append(order, res)
			}
			for _, id := range ids {
				per[res][id] = true
			}
		}
	}
	slices.Sort(order)
	s := ""
	for i, res := range order {
		if i == 0 {
			s = " with "
		} else {
			s += "; "
		}
		s += fmt.Sprintf("%d × %s", len(per[res]), res)
	}
	return s
}

// podWaiting notes what a pod's admission waits for, shown until its phase changes.
func (l *eventLog) podWaiting(uid types.UID, container, resource string, deadline time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waits[uid] = podWait{Container: container, Resource: resource, Deadline: deadline}
	l.signalLocked()
}

// waitOf returns what the pod waits for, if known.
func (l *eventLog) waitOf(uid types.UID) (podWait, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.waits[uid]
	return w, ok
}

// podRemoved notes that a pod left the source and released its devices.
func (l *eventLog) podRemoved(uid types.UID, namespace, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.waits, uid)
	delete(l.conflicts, uid)
	if _, ok := l.phases[uid]; !ok {
		return
	}
	delete(l.phases, uid)
	l.addLocked(statusapi.Event{Kind: statusapi.EventPodRemoved, Pod: namespace + "/" + name, Message: "removed; devices released"})
}

// removedResources returns the resources removed after their grace period, and when.
func (l *eventLog) removedResources() map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]time.Time, len(l.removed))
	for k, v := range l.removed {
		out[k] = v
	}
	return out
}

// observe compares the manager's snapshot with the previous one and records registrations,
// disconnects, removals and device health changes. Calls may come from several goroutines;
// each snapshot must be taken before its call, and a stale snapshot only repeats a change.
func (l *eventLog) observe(views []devicemanager.ResourceView, grace time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	healthEvents := 0
	for _, v := range views {
		seen[v.Name] = true
		prev, known := l.endpoints[v.Name]
		l.endpoints[v.Name] = v.Endpoint
		switch ep := v.Endpoint; {
		case ep.State == devicemanager.EndpointNone:
			if known && prev.State != devicemanager.EndpointNone {
				l.removeLocked(v.Name)
			}
		case ep.State == devicemanager.EndpointRunning && (!known || prev.Instance != ep.Instance || prev.State != ep.State):
			delete(l.removed, v.Name)
			verb := "registered"
			if known && prev.State != devicemanager.EndpointNone {
				verb = "registered again"
			}
			l.addLocked(statusapi.Event{Kind: statusapi.EventRegistered, Resource: v.Name,
				Message: fmt.Sprintf("device plugin %s on %s", verb, ep.Socket)})
		case ep.State == devicemanager.EndpointStopped && (!known || prev.State != ep.State || prev.Instance != ep.Instance):
			delete(l.removed, v.Name)
			msg := fmt.Sprintf("device plugin disconnected; capacity kept for the %s grace period", grace)
			if ep.Socket == "" {
				msg = fmt.Sprintf("restored from the checkpoint; waiting up to %s for its device plugin to register", grace)
			}
			l.addLocked(statusapi.Event{Kind: statusapi.EventDisconnected, Resource: v.Name, Message: msg})
		}
		healthEvents += l.observeHealthLocked(v, prev, known, healthEvents)
	}
	for name, prev := range l.endpoints {
		if seen[name] {
			continue
		}
		if prev.State != devicemanager.EndpointNone {
			l.removeLocked(name)
		}
		delete(l.endpoints, name)
		delete(l.health, name)
	}
}

// removeLocked records the removal of a resource. Callers hold mu.
func (l *eventLog) removeLocked(name string) {
	if _, ok := l.removed[name]; ok {
		return
	}
	l.removed[name] = l.now()
	l.addLocked(statusapi.Event{Kind: statusapi.EventRemoved, Resource: name,
		Message: "resource removed: its device plugin stayed away past the grace period"})
}

// observeHealthLocked records the devices of v whose health changed in the lists of one
// running plugin instance: not the changes of a disconnect (every device turns unhealthy,
// which the Disconnected event says once) or of a new instance's first list. already is how
// many health events this observation added before; it returns how many it added. Callers
// hold mu.
func (l *eventLog) observeHealthLocked(v devicemanager.ResourceView, prevEndpoint devicemanager.EndpointView, known bool, already int) int {
	prev := l.health[v.Name]
	now := make(map[string]string, len(v.Devices))
	for _, d := range v.Devices {
		now[d.ID] = d.Health
	}
	l.health[v.Name] = now
	if prev == nil || !known || prevEndpoint.Instance != v.Endpoint.Instance || !prevEndpoint.Listed ||
		v.Endpoint.State != devicemanager.EndpointRunning || prevEndpoint.State != devicemanager.EndpointRunning {
		return 0
	}
	added, skipped := 0, 0
	for _, d := range v.Devices {
		was, ok := prev[d.ID]
		if !ok || was == d.Health {
			continue
		}
		if already+added >= maxHealthEvents {
			skipped++
			continue
		}
		added++
		l.addLocked(statusapi.Event{Kind: statusapi.EventHealth, Resource: v.Name, Message: fmt.Sprintf("device %s is %s", d.ID, d.Health)})
	}
	if skipped > 0 {
		added++
		l.addLocked(statusapi.Event{Kind: statusapi.EventHealth, Resource: v.Name, Message: fmt.Sprintf("%d more devices changed health", skipped)})
	}
	return added
}

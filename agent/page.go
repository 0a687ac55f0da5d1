package agent

import (
	"context"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/devicemanager"
)

// gracePeriod is the stopped-endpoint grace period in force.
func (a *Agent) gracePeriod() time.Duration {
	if a.cfg.GracePeriod > 0 {
		return a.cfg.GracePeriod
	}
	return devicemanager.DefaultGracePeriod
}

// PageState takes the status page's view of the node. Like Status, it publishes capacity
// through GetCapacity, which removes resources whose grace period is over.
func (a *Agent) PageState() statusapi.PageState {
	capacity, allocatable, removed := a.manager.GetCapacity()
	if len(removed) > 0 { // logged here, as syncNodeStatus would have, since this call removed them
		a.log.Info("Device plugin resources removed from the node", "resourceNames", removed)
	}
	views := a.manager.Resources()
	a.events.observe(views, a.gracePeriod())
	now := a.clock.Now()
	st := statusapi.PageState{Node: a.cfg.NodeName, Time: now.UTC(), Policy: a.cfg.Policy.Name(),
		GracePeriodSeconds: a.gracePeriod().Seconds(), Pods: []statusapi.PagePod{}, Events: a.events.recent(),
		Runtime: a.containers.info()}

	a.mu.Lock()
	names := map[types.UID]string{}
	for uid, p := range a.pods {
		names[uid] = p.Namespace + "/" + p.Name
	}
	results := make([]*podresult.PodResult, 0, len(a.results))
	for uid, r := range a.results {
		names[uid] = r.Namespace + "/" + r.Name
		results = append(results, r)
	}
	a.mu.Unlock()

	st.Resources = statusapi.PageResources(views, capacity, allocatable, names, a.events.removedResources())
	sort.Slice(st.Resources, func(i, j int) bool { return st.Resources[i].Name < st.Resources[j].Name })

	for _, r := range results {
		st.Pods = append(st.Pods, statusapi.PagePodOf(r, a.events.pageWait(r, now)))
	}
	st.RecordDisagreements = pageDisagreements(a.manager.RecordDisagreements(), names, a.cfg.Policy.KeepRecordedDevices)
	sort.Slice(st.Pods, func(i, j int) bool {
		if st.Pods[i].Namespace != st.Pods[j].Namespace {
			return st.Pods[i].Namespace < st.Pods[j].Namespace
		}
		return st.Pods[i].Name < st.Pods[j].Name
	})
	return st
}

// pageWait is, for the page at now, what r's pod waits for while it is Pending; nil if it
// waits for nothing the log knows.
func (l *eventLog) pageWait(r *podresult.PodResult, now time.Time) *statusapi.PageWait {
	if r.Phase != podresult.PhasePending {
		return nil
	}
	w, ok := l.waitOf(r.UID)
	if !ok {
		return nil
	}
	return &statusapi.PageWait{Container: w.Container, Resource: w.Resource, Deadline: w.Deadline.UTC(),
		RemainingMs: max(w.Deadline.Sub(now).Milliseconds(), 0)}
}

// watchDevices records registrations, disconnects, removals and health changes in the
// timeline as they happen: at every device change and, for removals (which GetCapacity makes
// without a change signal), every second.
func (a *Agent) watchDevices(ctx context.Context) error {
	for {
		changed := a.manager.DeviceChanges()
		a.events.observe(a.manager.Resources(), a.gracePeriod())
		t := a.clock.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-changed:
			a.events.touch() // the devices the page shows changed
		case <-t.C():
		}
		t.Stop()
	}
}

// PageChanges returns a channel closed at the next change of what PageState shows: an event
// in the timeline, or a device change (which watchDevices passes on).
func (a *Agent) PageChanges() <-chan struct{} { return a.events.changes() }

// pageDisagreements names the pods of the manager's record disagreements (names: UID →
// namespace/name; an unknown pod stays its UID); kept says whether the policy kept the
// recorded devices.
func pageDisagreements(found []devicemanager.RecordDisagreement, names map[types.UID]string, kept bool) []statusapi.PageDisagreement {
	name := func(uid string) string {
		if n, ok := names[types.UID(uid)]; ok {
			return n
		}
		return uid
	}
	var out []statusapi.PageDisagreement
	for _, d := range found {
		pd := statusapi.PageDisagreement{Pod: name(d.PodUID), Container: d.ContainerName, Resource: d.ResourceName,
			Recorded: d.Recorded, Checkpointed: d.Checkpointed, Kept: kept}
		for _, uid := range d.HeldByOthers {
			pd.HeldByOthers = append(pd.HeldByOthers, name(uid))
		}
		out = append(out, pd)
	}
	return out
}

package agent

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kdm-project/kdm/agent/apipods"
	"github.com/kdm-project/kdm/agent/podresult"
)

// ReasonDevicesAssigned is the Normal event naming the devices an admitted API-server pod got.
const ReasonDevicesAssigned = apipods.ReasonDevicesAssigned

// apiPods is the agent as the API server pod source sees it (apipods.Pods): the source decides
// which of the node's pods need their devices, the agent tracks and admits them.
type apiPods struct {
	a   *Agent
	src *apipods.Source
}

var _ apipods.Pods = (*apiPods)(nil)

// newAPIPods builds the API server pod source of the agent's KubeClient and NodeName.
func newAPIPods(a *Agent) *apiPods {
	p := &apiPods{a: a}
	p.src = apipods.New(apipods.Config{Client: a.cfg.KubeClient, NodeName: a.cfg.NodeName,
		Clock: a.clock, Logger: a.log}, p)
	return p
}

// run runs the source until ctx ends (apipods.Source.Run).
func (p *apiPods) run(ctx context.Context, sourceReady func()) error {
	return p.src.Run(ctx, sourceReady)
}

// enqueue has the source look at the pod again: its result was recorded, or its containers are
// gone.
func (p *apiPods) enqueue(pod *v1.Pod) { p.src.Enqueue(pod) }

// healthy returns the error of the source's last pod sync, nil if it succeeded.
func (p *apiPods) healthy() error { return p.src.Healthy() }

// Track adds the pod and starts its admission (Agent.track).
func (p *apiPods) Track(ctx context.Context, pod *v1.Pod) (<-chan struct{}, bool) {
	return p.a.track(ctx, sourceAPI, pod)
}

// Untrack removes the pod and releases its devices (Agent.untrack).
func (p *apiPods) Untrack(uid types.UID) { p.a.untrack(uid) }

// TrackedByName lists the UIDs of the API server's tracked pods with this namespace and name.
func (p *apiPods) TrackedByName(namespace, name string) []types.UID {
	a := p.a
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []types.UID
	for uid, pod := range a.pods {
		if a.podSource[uid] == sourceAPI && pod.Namespace == namespace && pod.Name == name {
			out = append(out, uid)
		}
	}
	return out
}

// Tracked reports whether any source's pod with this UID is tracked.
func (p *apiPods) Tracked(uid types.UID) bool {
	_, ok := p.a.podByUID(uid)
	return ok
}

// Result returns the pod's admission result, or nil while none is recorded.
func (p *apiPods) Result(uid types.UID) *podresult.PodResult {
	a := p.a
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.results[uid]
}

// Stopping reports whether the removed pod's containers or sandbox may still exist, or its
// devices are still to be released. The removal worker enqueues the pod once they are
// (Agent.releaseAll).
func (p *apiPods) Stopping(uid types.UID) bool {
	return p.a.containers != nil && p.a.containers.isStopping(uid) || p.a.releasePending(uid)
}

// AdmittedBefore reports whether the pod was admitted by an earlier run of the agent.
func (p *apiPods) AdmittedBefore(uid types.UID) bool { return p.a.admittedBefore(uid) }

package agent

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/agent/podresult"
)

// admission is one pod's admission in flight.
type admission struct {
	cancel context.CancelFunc
	// done is closed when the admission is over: recorded, or abandoned.
	done chan struct{}
	// settled is closed when the admission is over or has started waiting for a device
	// plugin (deferred admission): nothing the agent waits on at start-up is still to come.
	settled    chan struct{}
	settleOnce sync.Once
}

func (ad *admission) settle() { ad.settleOnce.Do(func() { close(ad.settled) }) }

// ReasonWaitingForDevicePlugin is the reason of a Pending result: the pod's admission waits for
// a device plugin to register (Policy.DeferAdmission).
const ReasonWaitingForDevicePlugin = "WaitingForDevicePlugin"

// Admission order. Pods are admitted one after another in the order their sources list them
// (by creation time, then namespace and name, as the kubelet does), but only where they
// compete: an admission waits for the earlier admissions that ask for any of the same device
// resources, and for nothing else. So the same inputs always pick the same winner, and a pod
// waiting for its plugin holds up only later pods that want the same resource: never pods of
// other resources, pods without devices, or releases.

// deviceResources lists the device-plugin resources any container of the pod asks for.
func deviceResources(pod *v1.Pod) []string {
	seen := map[string]bool{}
	for _, c := range allContainers(pod) {
		for name, q := range c.container.Resources.Limits {
			if isExtendedResource(name) && !q.IsZero() {
				seen[string(name)] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// queueLocked registers ad as the latest admission of each of the pod's resources and returns
// the earlier admissions it must wait for. Callers hold mu.
func (a *Agent) queueLocked(pod *v1.Pod, ad *admission) []*admission {
	var deps []*admission
	for _, r := range deviceResources(pod) {
		if prev := a.lastAdmission[r]; prev != nil {
			deps = append(deps, prev)
		}
		a.lastAdmission[r] = ad
	}
	return deps
}

// dequeueLocked forgets ad as the latest admission of its resources. Callers hold mu.
func (a *Agent) dequeueLocked(pod *v1.Pod, ad *admission) {
	for _, r := range deviceResources(pod) {
		if a.lastAdmission[r] == ad {
			delete(a.lastAdmission, r)
		}
	}
}

// waitForTurn blocks until every admission in deps is over, or ctx ends (false).
func waitForTurn(ctx context.Context, deps []*admission) bool {
	for _, d := range deps {
		select {
		case <-d.done:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// markPending is the manager's OnAdmissionDeferred: the pod's admission waits for the plugin
// of resource. The pod is recorded as Pending, with the resource and until when it waits, so
// that pods/*.json, /status, the pending gauge and (for API pods) the Pod's status show it.
func (a *Agent) markPending(podUID, container, resource string) {
	a.mu.Lock()
	pod := a.pods[types.UID(podUID)]
	ad := a.inflight[types.UID(podUID)]
	a.mu.Unlock()
	if ad != nil {
		ad.settle()
	}
	if pod == nil {
		return
	}
	timeout := a.manager.Policy().DeferAdmissionTimeout
	deadline := a.clock.Now().Add(timeout).UTC().Truncate(time.Second)
	r := &podresult.PodResult{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Phase: podresult.PhasePending,
		Reason: ReasonWaitingForDevicePlugin,
		Message: fmt.Sprintf("container %q waits for the device plugin of %s to register, until %s at the latest",
			container, resource, deadline.Format(time.RFC3339)),
		Warning: pod.Annotations[keptRequestsAnnotation]}
	a.log.Info("Pod admission waits for a device plugin", "pod", klog.KObj(pod), "podUID", pod.UID,
		"containerName", container, "resourceName", resource, "deadline", deadline)
	a.events.podWaiting(pod.UID, container, resource, deadline)
	a.record(pod, r)
}

// pendingPods counts the pods whose admission waits for a device plugin.
func (a *Agent) pendingPods() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, r := range a.results {
		if r.Phase == podresult.PhasePending {
			n++
		}
	}
	return n
}

// admittedBefore reports whether the pod was admitted by an earlier run of the agent.
func (a *Agent) admittedBefore(uid types.UID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.results[uid]
	return r != nil && r.Phase == podresult.PhaseAdmitted
}

// restoredUnseen reports whether a pod with this UID was admitted, or was waiting for a device
// plugin, before a restart and has not been seen in a pod source since: its first version
// after the restart cannot change its devices, so there is nothing to wait for.
func (a *Agent) restoredUnseen(uid types.UID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, seen := a.pods[uid]; seen {
		return false
	}
	r := a.results[uid]
	return r != nil && (r.Phase == podresult.PhaseAdmitted || r.Phase == podresult.PhasePending)
}

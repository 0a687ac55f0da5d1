package agent

import (
	"context"
	"errors"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/devicemanager"
)

// dropStaleResults forgets the results of pods that ran before a restart but are no longer in
// the source: their manifests went away while the agent was down.
func (a *Agent) dropStaleResults() {
	a.mu.Lock()
	var stale []*podresult.PodResult
	for uid, r := range a.results {
		if _, ok := a.pods[uid]; !ok {
			stale = append(stale, r)
			if a.containers == nil {
				delete(a.results, uid)
			}
		}
	}
	a.mu.Unlock()
	if a.containers != nil {
		// Their containers may still run: the devices go once the runtime removed them.
		for _, r := range stale {
			a.log.Info("Pod removed while the agent was down; stopping its containers", "pod", klog.KRef(r.Namespace, r.Name), "podUID", r.UID)
			a.containers.stopRestored(r)
		}
		return
	}
	for _, r := range stale {
		if err := os.Remove(podresult.Path(a.cfg.PodsDir(), podresult.PodOf(r))); err != nil && !errors.Is(err, os.ErrNotExist) {
			a.log.Error(err, "Failed to remove stale pod result", "pod", klog.KRef(r.Namespace, r.Name))
		}
		a.log.Info("Pod removed while the agent was down; devices released", "pod", klog.KRef(r.Namespace, r.Name), "podUID", r.UID)
	}
}

// track adds the pod to the agent's pods and starts its admission. It returns a channel closed
// when that admission is over, or false if no admission started.
//
// A tracked pod is never re-admitted: if the source's version asks for other devices than the
// tracked one, the tracked pod stays and its result carries a warning (logged once). A pod
// rejected as invalid whose source changed is evaluated again. A pod that was admitted before
// a restart with other device requests than its spec now names is admitted with the requests
// it was admitted with, and a warning: a running container's devices do not change.
func (a *Agent) track(ctx context.Context, source string, pod *v1.Pod) (<-chan struct{}, bool) {
	prev, kept := a.settleVersion(pod, func(tracked *v1.Pod) string { return requestsWarning(admittedRequestsOf(tracked), pod) })
	if kept || a.keepRejected(source, pod, prev) {
		return nil, false
	}
	return a.startTracking(ctx, source, a.keepAdmittedRequests(pod, prev))
}

// keepRejected tracks an untracked pod that an earlier run rejected (prev, its result read back
// at start) without admitting it again, and reports whether it did. A rejection is terminal, as
// the kubelet's Failed phase is: however often kdm restarts, and whatever is free by then, the
// pod stays rejected until its source removes it; a retry is a new pod (a new UID). Only a pod
// rejected as invalid is judged anew, since its source must have changed for it to be valid.
func (a *Agent) keepRejected(source string, pod *v1.Pod, prev *podresult.PodResult) bool {
	if prev == nil || prev.Phase != podresult.PhaseRejected || prev.Reason == ReasonInvalidPod {
		return false
	}
	a.mu.Lock()
	if _, ok := a.pods[pod.UID]; ok {
		a.mu.Unlock()
		return true
	}
	a.pods[pod.UID] = pod
	a.podSource[pod.UID] = source
	a.mu.Unlock()
	a.log.Info("Pod was rejected before a restart; it stays rejected", "pod", klog.KObj(pod), "podUID", pod.UID,
		"reason", prev.Reason, "message", prev.Message)
	if source == sourceAPI && a.kube != nil {
		a.kube.enqueue(pod) // its status says Failed
	}
	return true
}

// settleVersion weighs a source's version of a pod against the tracked one. kept is true when
// the tracked pod stays: the version is the same, or the tracked pod was not rejected as
// invalid, in which case warning(tracked) is noted on it. Otherwise the caller admits pod;
// prev is the pod's earlier result (nil once a pod rejected as invalid was dropped to be
// judged anew).
func (a *Agent) settleVersion(pod *v1.Pod, warning func(tracked *v1.Pod) string) (prev *podresult.PodResult, kept bool) {
	a.mu.Lock()
	tracked, ok := a.pods[pod.UID]
	prev = a.results[pod.UID]
	a.mu.Unlock()
	if !ok {
		return prev, false
	}
	if tracked == pod {
		return nil, true
	}
	if prev == nil || prev.Reason != ReasonInvalidPod {
		a.noteKept(tracked, warning(tracked))
		return nil, true
	}
	a.untrack(pod.UID) // rejected as invalid; its new version is a new admission
	return nil, false
}

// startTracking adds an untracked pod to the agent's pods and starts its admission, as track
// does once it has settled which version of the pod to admit.
func (a *Agent) startTracking(ctx context.Context, source string, pod *v1.Pod) (<-chan struct{}, bool) {
	a.mu.Lock()
	if _, ok := a.pods[pod.UID]; ok {
		a.mu.Unlock()
		return nil, false
	}
	a.pods[pod.UID] = pod
	a.podSource[pod.UID] = source
	a.mu.Unlock()
	return a.startAdmission(ctx, pod), true
}

// untrack removes a pod from the agent's pods, abandons its admission if one is in flight and
// queues the release of its devices (removals.go); with a container runtime, once its containers
// are gone. It never waits for a checkpoint write or a container stop.
func (a *Agent) untrack(uid types.UID) {
	a.mu.Lock()
	pod, ok := a.pods[uid]
	delete(a.pods, uid)
	delete(a.podSource, uid)
	if ad := a.inflight[uid]; ad != nil {
		ad.cancel()
	}
	a.mu.Unlock()
	switch {
	case !ok:
	case a.containers != nil:
		a.containers.stop(pod) // its devices go once its containers are gone
	default:
		a.queueRelease(pod)
	}
}

// Pod sources: each source adds and removes only its own pods.
const (
	sourceManifests = "file"
	sourceAPI       = "api"
)

// trackedUIDs lists the UIDs of the pods the source added.
func (a *Agent) trackedUIDs(source string) []types.UID {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []types.UID
	for uid, s := range a.podSource {
		if s == source {
			out = append(out, uid)
		}
	}
	return out
}

// startAdmission admits the pod in its own goroutine, once the earlier admissions that ask
// for any of its device resources are over (see queue.go). It returns a channel closed when the
// admission is over or waits for a device plugin.
func (a *Agent) startAdmission(ctx context.Context, pod *v1.Pod) <-chan struct{} {
	actx, cancel := context.WithCancel(ctx)
	ad := &admission{cancel: cancel, done: make(chan struct{}), settled: make(chan struct{})}
	a.mu.Lock()
	a.inflight[pod.UID] = ad
	deps := a.queueLocked(pod, ad)
	a.mu.Unlock()
	a.admissions.Add(1)
	go func() {
		defer a.admissions.Done()
		defer func() {
			a.mu.Lock()
			if a.inflight[pod.UID] == ad {
				delete(a.inflight, pod.UID)
			}
			a.dequeueLocked(pod, ad)
			a.mu.Unlock()
			cancel()
			close(ad.done)
			ad.settle()
		}()
		if waitForTurn(actx, deps) {
			a.admit(actx, pod)
		}
	}()
	return ad.settled
}

func (a *Agent) cancelAdmissions() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ad := range a.inflight {
		ad.cancel()
	}
}

// admit allocates devices to every container, init containers first, and records the outcome.
// A failure rejects the pod with the kubelet's reason and message.
func (a *Agent) admit(ctx context.Context, pod *v1.Pod) {
	log := a.log.WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
	result := &podresult.PodResult{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Phase: podresult.PhaseAdmitted,
		Warning: pod.Annotations[keptRequestsAnnotation]}
	for _, c := range allContainers(pod) {
		if err := a.manager.Allocate(ctx, pod, c.container); err != nil {
			if ctx.Err() != nil {
				// The pod went away or the agent is stopping: whatever the plugin
				// answered (a Canceled status, say), this is no rejection. The manager
				// recorded nothing for the failed call.
				log.V(2).Info("Admission abandoned", "err", err)
				return
			}
			result.Phase = podresult.PhaseRejected
			result.Reason = ReasonUnexpectedAdmissionError
			result.Message = fmt.Sprintf("Allocate failed due to %v, which is unexpected", err)
			result.Containers = nil
			log.Info("Pod rejected", "reason", result.Reason, "message", result.Message)
			a.admissionResults.WithLabelValues(admissionRejected).Inc()
			a.record(pod, result)
			return
		}
	}
	for _, c := range allContainers(pod) {
		// With a container runtime, PreStartContainer comes just before each start
		// (containerRoom.runOptions); without one, admission is as close to a start as it gets.
		var opts *devicemanager.RunContainerOptions
		if a.containers != nil {
			opts = a.manager.ContainerRunOptions(string(pod.UID), c.container.Name)
		} else {
			var err error
			if opts, err = a.manager.GetDeviceRunContainerOptions(ctx, pod, c.container); err != nil {
				log.Error(err, "Failed to get device run options", "containerName", c.container.Name)
			}
		}
		result.Containers = append(result.Containers, podresult.ContainerResult{
			Name: c.container.Name, Init: c.init, Sidecar: c.sidecar, RunOptions: opts,
			Requests:    deviceRequests(c.container),
			Allocations: podresult.AllocationsOf(a.manager.GetContainerAllocations(string(pod.UID), c.container.Name)),
		})
	}
	if ctx.Err() != nil {
		log.V(2).Info("Admission abandoned", "err", ctx.Err())
		return
	}
	a.fillHealth(pod, result)
	log.Info("Pod admitted")
	a.admissionResults.WithLabelValues(admissionAdmitted).Inc()
	a.record(pod, result)
}

// record writes the result and then publishes it, unless the pod was removed meanwhile.
// Records are serialised, so a pod's file and its published result never disagree.
func (a *Agent) record(pod *v1.Pod, r *podresult.PodResult) { a.recordResult(pod, r, false) }

// recordResult is record; with stopping, it also records a pod that its source removed but whose
// result stays while its containers are being stopped (containers.go).
func (a *Agent) recordResult(pod *v1.Pod, r *podresult.PodResult, stopping bool) {
	a.recordMu.Lock()
	defer a.recordMu.Unlock()
	a.recordLocked(pod, r, stopping)
}

// updateResult changes the pod's recorded result with change, which reports whether it changed
// anything, and records it as recordResult does with stopping: the result is read and written
// under recordMu, so changes made at the same time (the runtime's status, a Terminating mark)
// never undo each other. A pod without a result is left alone.
func (a *Agent) updateResult(pod *v1.Pod, change func(*podresult.PodResult) bool) {
	a.recordMu.Lock()
	defer a.recordMu.Unlock()
	a.mu.Lock()
	prev := a.results[pod.UID]
	a.mu.Unlock()
	if prev == nil {
		return
	}
	r := *prev
	if change(&r) {
		a.recordLocked(pod, &r, true)
	}
}

// recordLocked is recordResult for callers that hold recordMu.
func (a *Agent) recordLocked(pod *v1.Pod, r *podresult.PodResult, stopping bool) {
	r.Updated = a.clock.Now().UTC()
	a.mu.Lock()
	_, tracked := a.pods[pod.UID]
	prev, hasResult := a.results[pod.UID]
	a.mu.Unlock()
	if !tracked && !(stopping && hasResult) {
		return
	}
	switch {
	case r.Runtime != nil:
	case a.containers == nil:
		r.Runtime = podresult.AdmissionOnly()
	case prev != nil:
		r.Runtime = prev.Runtime // a new admission outcome does not change what runs
	}
	if err := podresult.Write(a.cfg.PodsDir(), pod, r); err != nil {
		a.log.Error(err, "Failed to write pod result", "pod", klog.KObj(pod))
	}
	a.mu.Lock()
	a.results[pod.UID] = r
	fromAPI := a.podSource[pod.UID] == sourceAPI
	a.mu.Unlock()
	a.events.podRecorded(r)
	if r.Phase == podresult.PhaseRejected {
		a.manager.UpdateAllocatedDevices()
	}
	if a.containers != nil && r.Phase == podresult.PhaseAdmitted {
		a.containers.rt.Trigger()
	}
	if fromAPI {
		a.kube.enqueue(pod)
	}
}

type podContainer struct {
	container     *v1.Container
	init, sidecar bool
}

// allContainers lists init containers, then app containers, in spec order.
func allContainers(pod *v1.Pod) []podContainer {
	var out []podContainer
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		out = append(out, podContainer{container: c, init: true,
			sidecar: c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways})
	}
	for i := range pod.Spec.Containers {
		out = append(out, podContainer{container: &pod.Spec.Containers[i]})
	}
	return out
}

// podByUID returns the source's pod with this UID.
func (a *Agent) podByUID(uid types.UID) (*v1.Pod, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.pods[uid]
	return p, ok
}

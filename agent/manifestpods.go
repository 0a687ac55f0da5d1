package agent

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/agent/manifests"
	"github.com/kdm-project/kdm/agent/podresult"
)

// manifestPods is the agent as the manifest directory source sees it (manifests.Pods): the
// source decides which pods its files hold, the agent tracks and admits them.
type manifestPods struct{ a *Agent }

var _ manifests.Pods = manifestPods{}

// watchManifests runs the manifest directory source until ctx ends (manifests.Watch).
func (m manifestPods) watchManifests(ctx context.Context, sourceReady func()) error {
	cfg := manifests.Config{Path: m.a.cfg.PodManifestPath, ResyncPeriod: m.a.cfg.ResyncPeriod,
		Clock: m.a.clock, Logger: m.a.log}
	return manifests.Watch(ctx, cfg, m, sourceReady)
}

// Tracked lists the UIDs of the pods the manifest directory added.
func (m manifestPods) Tracked() []types.UID { return m.a.trackedUIDs(sourceManifests) }

// Untrack removes the pod and releases its devices (Agent.untrack).
func (m manifestPods) Untrack(uid types.UID) { m.a.untrack(uid) }

// AdmittedBefore reports whether the pod was admitted by an earlier run of the agent.
func (m manifestPods) AdmittedBefore(uid types.UID) bool { return m.a.admittedBefore(uid) }

// RestoredUnseen reports whether the pod was admitted, or waited for a device plugin, before a
// restart and is not tracked yet.
func (m manifestPods) RestoredUnseen(uid types.UID) bool { return m.a.restoredUnseen(uid) }

// RestoredByName lists the pods admitted before a restart by "namespace/name", for the
// manifest source's identity rule.
func (m manifestPods) RestoredByName() map[string][]types.UID {
	a := m.a
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string][]types.UID{}
	for uid, r := range a.results {
		if r.Phase == podresult.PhaseAdmitted || r.Phase == podresult.PhasePending {
			key := r.Namespace + "/" + r.Name
			out[key] = append(out[key], uid)
		}
	}
	return out
}

// Track hands a manifest's pod to track, or, if it failed validation, rejects it with
// ReasonInvalidPod without admission. An invalid new version of a tracked, admitted pod does
// not replace it: the pod stays, with a warning. After a restart, an invalid version of a pod
// that was admitted is admitted with the admitted requests if that makes it valid.
func (m manifestPods) Track(ctx context.Context, mp manifests.Pod) (<-chan struct{}, bool) {
	a := m.a
	if mp.Invalid == nil {
		return a.track(ctx, sourceManifests, mp.Pod)
	}
	pod := mp.Pod
	prev, kept := a.settleVersion(pod, func(*v1.Pod) string { return invalidWarning(mp.Invalid) })
	if kept {
		return nil, false
	}
	if admitted := resultRequests(prev); admitted != nil {
		if kept := withRequests(pod, admitted); manifests.Validate(kept) == nil {
			warning := invalidWarning(mp.Invalid)
			if kept.Annotations == nil {
				kept.Annotations = map[string]string{}
			}
			kept.Annotations[keptRequestsAnnotation] = warning
			a.log.Info("Pod's manifest became invalid since its admission; admitting it with the admitted requests",
				"pod", klog.KObj(pod), "podUID", pod.UID, "path", mp.Path, "warning", warning)
			return a.startTracking(ctx, sourceManifests, kept)
		}
	}
	a.mu.Lock()
	if _, ok := a.pods[pod.UID]; ok {
		a.mu.Unlock()
		return nil, false
	}
	a.pods[pod.UID] = pod
	a.podSource[pod.UID] = sourceManifests
	a.mu.Unlock()
	result := &podresult.PodResult{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Phase: podresult.PhaseRejected,
		Reason: ReasonInvalidPod, Message: mp.Invalid.Error()}
	a.log.Info("Pod rejected", "pod", klog.KObj(pod), "podUID", pod.UID, "path", mp.Path,
		"reason", result.Reason, "message", result.Message)
	a.admissionResults.WithLabelValues(admissionInvalid).Inc()
	a.record(pod, result)
	done := make(chan struct{})
	close(done)
	return done, true
}

// invalidWarning says why an admitted pod stays although its manifest's version is invalid.
func invalidWarning(invalid error) string {
	return fmt.Sprintf("the manifest's version of the pod is invalid (%v); kdm keeps the admitted pod and its device requests", invalid)
}

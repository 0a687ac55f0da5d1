package agent

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/internal/resourcename"
)

// ReasonUnexpectedAdmissionError is the kubelet's reason for a pod whose device allocation
// failed.
const ReasonUnexpectedAdmissionError = "UnexpectedAdmissionError"

// ReasonInvalidPod is the reason recorded for a pod that fails validation (manifests.Validate).
// Such a pod is rejected before admission: it never reaches Allocate and holds no device.
const ReasonInvalidPod = "InvalidPod"

// deviceRequests lists the container's extended-resource limits: what it asks of device
// plugins.
func deviceRequests(c *v1.Container) map[string]int64 {
	var out map[string]int64
	for name, q := range c.Resources.Limits {
		if !isExtendedResource(name) {
			continue
		}
		if out == nil {
			out = map[string]int64{}
		}
		out[string(name)] = q.Value()
	}
	return out
}

// isExtendedResource reports whether name is a resource a device plugin may serve, by the
// kubelet's rule (resourcename.IsExtended).
func isExtendedResource(name v1.ResourceName) bool { return resourcename.IsExtended(string(name)) }

// IsExtendedResourceName reports whether name is an extended resource name, the kubelet's rule
// (resourcename.IsExtended): domain-qualified outside the kubernetes.io domains, not a quota
// "requests." name, and a valid qualified name. Device-plugin resources are.
func IsExtendedResourceName(name v1.ResourceName) bool {
	return resourcename.IsExtended(string(name))
}

// fillConflicts sets the result's Conflicts from the manager's contested devices, naming the
// other claimants as the agent knows them, and logs when the pod's conflicts change.
func (a *Agent) fillConflicts(pod *v1.Pod, r *podresult.PodResult) {
	contests := a.manager.ContestsOf(string(pod.UID))
	a.mu.Lock()
	var prev []podresult.DeviceConflict
	if old := a.results[pod.UID]; old != nil {
		prev = old.Conflicts
	}
	r.Conflicts = nil
	for _, c := range contests {
		dc := podresult.DeviceConflict{Resource: c.Resource, DeviceID: c.DeviceID}
		for _, uid := range c.PodUIDs {
			if types.UID(uid) != pod.UID {
				dc.Pods = append(dc.Pods, a.podNameLocked(types.UID(uid)))
			}
		}
		r.Conflicts = append(r.Conflicts, dc)
	}
	a.mu.Unlock()
	if equalConflicts(prev, r.Conflicts) {
		return
	}
	log := a.log.WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
	if len(r.Conflicts) == 0 {
		log.Info("Pod's contested devices are its own again: the other claimants are gone")
		return
	}
	for _, c := range r.Conflicts {
		log.Info("Warning: pod's restored devices are also claimed by other pods; the device is given to no other pod until one claimant is left",
			"resourceName", c.Resource, "deviceID", c.DeviceID, "otherPods", c.Pods)
	}
}

// podNameLocked names a pod as namespace/name from the source or its result, or by its UID.
// Callers hold mu.
func (a *Agent) podNameLocked(uid types.UID) string {
	if p := a.pods[uid]; p != nil {
		return p.Namespace + "/" + p.Name
	}
	if r := a.results[uid]; r != nil {
		return r.Namespace + "/" + r.Name
	}
	return string(uid)
}

func equalConflicts(a, b []podresult.DeviceConflict) bool {
	return slices.EqualFunc(a, b, func(x, y podresult.DeviceConflict) bool {
		return x.Resource == y.Resource && x.DeviceID == y.DeviceID && slices.Equal(x.Pods, y.Pods)
	})
}

package agent

import (
	"fmt"
	"maps"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/agent/podresult"
)

// A pod's device requests cannot change while it runs: the kubelet re-admits nothing, and a
// container's devices are fixed when it starts. This file keeps the admitted requests when a
// source's pod changes under the same UID, during a run and across restarts.

// keptRequestsAnnotation carries, on kdm's own copy of a pod, the warning that its device
// requests were set back to the admitted ones. admit copies it into the pod's result. It is
// kdm-internal: a source's pod that sets it has it removed.
const keptRequestsAnnotation = "kdm.kdm-project.io/kept-device-requests"

// containerRequests are device requests per container name, then per resource name.
type containerRequests map[string]map[string]int64

// admittedRequestsOf lists the pod's device requests (extended-resource limits) per container.
func admittedRequestsOf(pod *v1.Pod) containerRequests {
	out := containerRequests{}
	for _, c := range allContainers(pod) {
		out[c.container.Name] = deviceRequests(c.container)
	}
	return out
}

// resultRequests lists the device requests an admission result recorded, or nil if the result
// recorded no containers.
func resultRequests(r *podresult.PodResult) containerRequests {
	if r == nil || r.Phase != podresult.PhaseAdmitted || len(r.Containers) == 0 {
		return nil
	}
	out := containerRequests{}
	for _, c := range r.Containers {
		out[c.Name] = c.Requests
	}
	return out
}

// requestsWarning compares the admitted requests with the pod's and describes every
// difference, or returns "" when they agree.
func requestsWarning(admitted containerRequests, pod *v1.Pod) string {
	var changes []string
	seen := map[string]bool{}
	for _, c := range allContainers(pod) {
		name := c.container.Name
		seen[name] = true
		old, ok := admitted[name]
		cur := deviceRequests(c.container)
		if !ok {
			if len(cur) > 0 {
				changes = append(changes, fmt.Sprintf("container %q was not admitted and gets no devices", name))
			}
			continue
		}
		for _, res := range unionKeys(old, cur) {
			if old[res] != cur[res] {
				changes = append(changes, fmt.Sprintf("container %q %s changed from %d to %d", name, res, old[res], cur[res]))
			}
		}
	}
	for _, name := range sortedKeys(admitted) {
		if !seen[name] && len(admitted[name]) > 0 {
			changes = append(changes, fmt.Sprintf("admitted container %q is no longer in the spec", name))
		}
	}
	if len(changes) == 0 {
		return ""
	}
	return fmt.Sprintf("device requests changed under the admitted pod (%s); kdm keeps the admitted requests and devices: give the pod a new UID to change them",
		strings.Join(changes, "; "))
}

// withRequests returns a copy of the pod whose containers ask for exactly the given device
// requests, in both limits and requests; containers without an entry ask for none.
func withRequests(pod *v1.Pod, admitted containerRequests) *v1.Pod {
	out := pod.DeepCopy()
	for _, c := range allContainers(out) {
		r := &c.container.Resources
		for _, list := range []v1.ResourceList{r.Limits, r.Requests} {
			for name := range list {
				if isExtendedResource(name) {
					delete(list, name)
				}
			}
		}
		for res, n := range admitted[c.container.Name] {
			if r.Limits == nil {
				r.Limits = v1.ResourceList{}
			}
			if r.Requests == nil {
				r.Requests = v1.ResourceList{}
			}
			r.Limits[v1.ResourceName(res)] = *resource.NewQuantity(n, resource.DecimalSI)
			r.Requests[v1.ResourceName(res)] = *resource.NewQuantity(n, resource.DecimalSI)
		}
	}
	return out
}

// keepAdmittedRequests returns the pod to admit given its result from before a restart: the
// pod itself when it asks for what was admitted (or nothing was), and otherwise a copy set back
// to the admitted requests, annotated with the warning, which is also logged.
func (a *Agent) keepAdmittedRequests(pod *v1.Pod, prev *podresult.PodResult) *v1.Pod {
	if _, set := pod.Annotations[keptRequestsAnnotation]; set {
		pod = pod.DeepCopy()
		delete(pod.Annotations, keptRequestsAnnotation)
	}
	admitted := resultRequests(prev)
	if admitted == nil {
		return pod
	}
	warning := requestsWarning(admitted, pod)
	if warning == "" {
		return pod
	}
	kept := withRequests(pod, admitted)
	if kept.Annotations == nil {
		kept.Annotations = map[string]string{}
	}
	kept.Annotations[keptRequestsAnnotation] = warning
	a.log.Info("Pod's device requests changed since its admission; admitting it with the admitted requests",
		"pod", klog.KObj(pod), "podUID", pod.UID, "warning", warning)
	return kept
}

// noteKept records on the pod's admitted result that the source asked for something kdm does
// not follow, or clears that warning when warning is "". It logs only when the warning changes,
// so a pod is warned about once per change.
func (a *Agent) noteKept(pod *v1.Pod, warning string) {
	a.mu.Lock()
	r := a.results[pod.UID]
	a.mu.Unlock()
	if r == nil || r.Phase != podresult.PhaseAdmitted || r.Warning == warning {
		return
	}
	if warning == "" {
		a.log.Info("Pod's source agrees with its admission again", "pod", klog.KObj(pod), "podUID", pod.UID)
	} else {
		a.log.Info("Pod's source changed; kept the admitted pod", "pod", klog.KObj(pod), "podUID", pod.UID, "warning", warning)
	}
	updated := *r
	updated.Warning = warning
	a.record(pod, &updated)
}

func unionKeys(a, b map[string]int64) []string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return sortedKeys(keys)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

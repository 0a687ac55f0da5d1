package apipods

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kdm-project/kdm/agent/internal/kubeapi"
	"github.com/kdm-project/kdm/agent/podresult"
)

// Event reasons of the pods kdm admits.
const (
	// ReasonDevicesAssigned is the Normal event naming the devices an admitted pod got.
	ReasonDevicesAssigned = "DevicesAssigned"
	// reasonContainersNotReady is the kubelet's reason for Ready and ContainersReady False.
	reasonContainersNotReady = "ContainersNotReady"
)

// publish writes the admission outcome to the pod's status with a strategic merge patch, as
// the kubelet does: Running with every container ready for an admitted pod (and a Normal
// event naming its devices), Pending with the waiting reason for a pod that waits for a
// device plugin, Failed with the kubelet's reason and message (and a Warning event) for a
// rejected one.
func (s *Source) publish(ctx context.Context, pod *v1.Pod, r *podresult.PodResult) error {
	now := metav1.NewTime(s.clock.Now())
	var status *v1.PodStatus
	switch {
	case r.Phase == podresult.PhaseAdmitted && r.Runtime != nil && r.Runtime.ContainersRun:
		status = runtimePodStatus(pod, r, now)
	case r.Phase == podresult.PhaseAdmitted && pod.Status.Phase != v1.PodRunning:
		status = admittedStatus(pod, r, now)
	case r.Phase == podresult.PhasePending && pod.Status.Phase == v1.PodPending && !hasWaitingCondition(pod, r):
		status = pendingStatus(pod, r, now)
	case r.Phase == podresult.PhaseRejected && pod.Status.Phase != v1.PodFailed:
		// The kubelet's rejectPod: the QoS class is kept, everything else replaced.
		status = &v1.PodStatus{
			QOSClass: pod.Status.QOSClass,
			Phase:    v1.PodFailed,
			Reason:   r.Reason,
			Message:  "Pod was rejected: " + r.Message,
		}
	default:
		return nil
	}
	patch, err := podStatusPatch(pod, status)
	if err != nil {
		return err
	}
	if patch == nil {
		return nil // the pod's status already says this
	}
	_, err = s.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or replaced by a pod of the same name (the UID precondition)
	}
	if err != nil {
		return fmt.Errorf("patching status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	s.log.V(2).Info("Pod status updated", "pod", klog.KObj(pod), "podUID", pod.UID, "phase", status.Phase, "reason", status.Reason)
	switch status.Phase {
	case v1.PodFailed:
		s.recorder.Event(pod, v1.EventTypeWarning, r.Reason, r.Message)
	case v1.PodRunning:
		if pod.Status.Phase == v1.PodRunning {
			break // a container changed state; the devices were named when the pod started
		}
		if msg := assignedDevices(r); msg != "" {
			s.recorder.Event(pod, v1.EventTypeNormal, ReasonDevicesAssigned, msg)
		}
	}
	return nil
}

// podStatusPatch is the strategic merge patch from pod's status to status, with the pod's UID
// as a precondition: a pod recreated under the same name is not patched.
func podStatusPatch(pod *v1.Pod, status *v1.PodStatus) ([]byte, error) {
	raw, err := kubeapi.StatusPatch(&v1.Pod{Status: pod.Status}, &v1.Pod{Status: *status}, v1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("building pod status patch: %w", err)
	}
	var patch map[string]any
	if err := json.Unmarshal(raw, &patch); err != nil {
		return nil, fmt.Errorf("building pod status patch: %w", err)
	}
	if len(patch) == 0 {
		return nil, nil
	}
	patch["metadata"] = map[string]any{"uid": pod.UID}
	return json.Marshal(patch)
}

// assignedDevices says which devices each container of r got, as
// "container main: nvidia.com/gpu GPU-1, GPU-2; container setup: …"; empty without devices.
func assignedDevices(r *podresult.PodResult) string {
	var parts []string
	for _, c := range r.Containers {
		devs := c.Devices()
		names := make([]string, 0, len(devs))
		for res := range devs {
			names = append(names, res)
		}
		slices.Sort(names)
		for _, res := range names {
			parts = append(parts, fmt.Sprintf("container %s: %s %s", c.Name, res, strings.Join(devs[res], ", ")))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "Assigned devices: " + strings.Join(parts, "; ")
}

// pendingStatus is the status of a pod whose admission waits for a device plugin: still
// Pending, with a PodReadyToStartContainers condition False that gives the reason, the
// resource and the deadline, Ready and ContainersReady False, and every container waiting
// with that reason (which `kubectl get pods` shows as the pod's status).
func pendingStatus(pod *v1.Pod, r *podresult.PodResult, now metav1.Time) *v1.PodStatus {
	st := pod.Status.DeepCopy()
	setPodCondition(st, v1.PodCondition{Type: v1.PodReadyToStartContainers, Status: v1.ConditionFalse,
		Reason: r.Reason, Message: r.Message}, now)
	for _, t := range []v1.PodConditionType{v1.ContainersReady, v1.PodReady} {
		setPodCondition(st, v1.PodCondition{Type: t, Status: v1.ConditionFalse, Reason: reasonContainersNotReady,
			Message: "containers wait for a device plugin"}, now)
	}
	waiting := func(c v1.Container) v1.ContainerStatus {
		return v1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr.To(false),
			State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: r.Reason, Message: r.Message}}}
	}
	st.InitContainerStatuses, st.ContainerStatuses = nil, nil
	for _, c := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, waiting(c))
	}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, waiting(c))
	}
	return st
}

// hasWaitingCondition reports whether the pod's status already says what r says.
func hasWaitingCondition(pod *v1.Pod, r *podresult.PodResult) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodReadyToStartContainers && c.Status == v1.ConditionFalse && c.Reason == r.Reason && c.Message == r.Message {
			return true
		}
	}
	return false
}

// admittedStatus is the status of a pod whose devices are allocated. kdm runs no containers:
// the pod is reported Running with every condition True; its regular init containers
// terminated (exit code 0, Completed), its app containers and sidecars running, started and
// ready since now, each with the health of its devices. An embedder with a runtime reports
// its own states.
func admittedStatus(pod *v1.Pod, r *podresult.PodResult, now metav1.Time) *v1.PodStatus {
	st := pod.Status.DeepCopy()
	st.Phase = v1.PodRunning
	st.Reason, st.Message = "", ""
	if st.StartTime == nil {
		st.StartTime = &now
	}
	for _, t := range []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodInitialized, v1.ContainersReady, v1.PodReady} {
		setPodCondition(st, v1.PodCondition{Type: t, Status: v1.ConditionTrue}, now)
	}
	health := map[string][]v1.ResourceStatus{}
	for _, c := range r.Containers {
		health[c.Name] = c.AllocatedResourcesStatus
	}
	running := func(c v1.Container) v1.ContainerStatus {
		return v1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true, Started: ptr.To(true),
			State:                    v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
			AllocatedResourcesStatus: health[c.Name]}
	}
	st.InitContainerStatuses, st.ContainerStatuses = nil, nil
	for _, c := range pod.Spec.InitContainers {
		cs := running(c)
		if c.RestartPolicy == nil || *c.RestartPolicy != v1.ContainerRestartPolicyAlways {
			cs.Started = ptr.To(false)
			cs.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
	}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, running(c))
	}
	return st
}

// setPodCondition sets want's status, reason and message on the condition of its type,
// moving its transition time to now when the status changes, or appends it.
func setPodCondition(st *v1.PodStatus, want v1.PodCondition, now metav1.Time) {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type == want.Type {
			if c.Status != want.Status {
				c.LastTransitionTime = now
			}
			c.Status, c.Reason, c.Message = want.Status, want.Reason, want.Message
			return
		}
	}
	want.LastTransitionTime = now
	st.Conditions = append(st.Conditions, want)
}

// runtimePodStatus is the status of an admitted pod whose containers run through the container
// runtime: the phase and container states the runtime reports, each container with the health
// of its devices, and the conditions they give (no probes: a running container is ready).
func runtimePodStatus(pod *v1.Pod, r *podresult.PodResult, now metav1.Time) *v1.PodStatus {
	rs := r.Runtime
	st := pod.Status.DeepCopy()
	st.Phase = rs.Phase
	if st.Phase == "" {
		st.Phase = v1.PodPending
	}
	st.Reason, st.Message = "", ""
	if st.StartTime == nil {
		st.StartTime = &now
	}
	health := map[string][]v1.ResourceStatus{}
	for _, c := range r.Containers {
		health[c.Name] = c.AllocatedResourcesStatus
	}
	withHealth := func(in []v1.ContainerStatus) []v1.ContainerStatus {
		out := make([]v1.ContainerStatus, 0, len(in))
		for _, cs := range in {
			cs.AllocatedResourcesStatus = health[cs.Name]
			out = append(out, cs)
		}
		return out
	}
	st.InitContainerStatuses = withHealth(rs.InitContainerStatuses)
	st.ContainerStatuses = withHealth(rs.ContainerStatuses)

	condition := func(t v1.PodConditionType, ok bool, reason, message string) {
		c := v1.PodCondition{Type: t, Status: v1.ConditionTrue}
		if !ok {
			c.Status, c.Reason, c.Message = v1.ConditionFalse, reason, message
		}
		setPodCondition(st, c, now)
	}
	condition(v1.PodReadyToStartContainers, rs.SandboxID != "", "", "")
	initialized, pendingInit := initContainersDone(pod, rs)
	condition(v1.PodInitialized, initialized, "ContainersNotInitialized", "containers with incomplete status: "+pendingInit)
	var notReady []string
	for _, cs := range rs.ContainerStatuses {
		if !cs.Ready {
			notReady = append(notReady, cs.Name)
		}
	}
	ready := len(notReady) == 0 && len(rs.ContainerStatuses) > 0
	reason, message := reasonContainersNotReady, "containers with unready status: "+strings.Join(notReady, ", ")
	if st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed {
		ready, reason, message = false, "PodCompleted", ""
	}
	condition(v1.ContainersReady, ready, reason, message)
	condition(v1.PodReady, ready, reason, message)
	return st
}

// initContainersDone reports whether every regular init container of the pod exited 0 and
// every sidecar started; if not, it names those that did not, as "[a b]".
func initContainersDone(pod *v1.Pod, rs *podresult.RuntimeStatus) (bool, string) {
	var pending []string
	for _, c := range pod.Spec.InitContainers {
		cs, ok := rs.ContainerStatus(c.Name, true)
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
		switch {
		case !ok:
			pending = append(pending, c.Name)
		case sidecar && (cs.Started == nil || !*cs.Started):
			pending = append(pending, c.Name)
		case !sidecar && (cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0):
			pending = append(pending, c.Name)
		}
	}
	return len(pending) == 0, "[" + strings.Join(pending, " ") + "]"
}

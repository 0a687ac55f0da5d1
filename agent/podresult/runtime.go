package podresult

import (
	v1 "k8s.io/api/core/v1"
)

// RuntimeStatus is the part of a pod result that says what runs. With a container runtime it
// holds the runtime's view: the pod's phase and every container's state, exit code and restart
// count, in the Pod API's shapes. Without one it says that no containers run: kdm then only
// admits pods and assigns their devices.
type RuntimeStatus struct {
	// ContainersRun is true when kdm runs the pod's containers through a container runtime.
	ContainersRun bool `json:"containersRun"`
	// Phase is the pod's phase from its containers (Pending, Running, Succeeded, Failed);
	// empty when no containers run.
	Phase v1.PodPhase `json:"phase,omitempty"`
	// Message explains the phase or, when no containers run, says so.
	Message string `json:"message,omitempty"`
	// SandboxID is the runtime's pod sandbox.
	SandboxID             string               `json:"sandboxID,omitempty"`
	InitContainerStatuses []v1.ContainerStatus `json:"initContainerStatuses,omitempty"`
	ContainerStatuses     []v1.ContainerStatus `json:"containerStatuses,omitempty"`
}

// NoContainersMessage is what every view says when kdm runs no containers.
const NoContainersMessage = "no containers run: kdm admits pods and assigns their devices, and was started without a container runtime (--container-runtime-endpoint)"

// AdmissionOnly is the runtime part of a pod result when kdm runs no containers.
func AdmissionOnly() *RuntimeStatus {
	return &RuntimeStatus{ContainersRun: false, Message: NoContainersMessage}
}

// Running reports whether any container of the pod runs. A nil status runs nothing.
func (s *RuntimeStatus) Running() bool {
	if s == nil {
		return false
	}
	for _, list := range [][]v1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses} {
		for _, c := range list {
			if c.State.Running != nil {
				return true
			}
		}
	}
	return false
}

// ContainerStatus finds the runtime's status of a container (an init container when init is
// true); false when there is none, or when s is nil.
func (s *RuntimeStatus) ContainerStatus(name string, init bool) (v1.ContainerStatus, bool) {
	if s == nil {
		return v1.ContainerStatus{}, false
	}
	list := s.ContainerStatuses
	if init {
		list = s.InitContainerStatuses
	}
	for _, c := range list {
		if c.Name == name {
			return c, true
		}
	}
	return v1.ContainerStatus{}, false
}

// Terminal reports whether every container of the pod ended and none will start again (phase
// Succeeded or Failed), as the runtime reports it: such a pod's devices go back to the pool, as
// the kubelet releases a finished pod's devices. A nil status is not terminal.
func (s *RuntimeStatus) Terminal() bool {
	if s == nil || !s.ContainersRun || s.Running() {
		return false
	}
	return s.Phase == v1.PodSucceeded || s.Phase == v1.PodFailed
}

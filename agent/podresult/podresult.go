package podresult

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
)

// The phases a result records.
const (
	PhaseAdmitted = "Admitted"
	PhaseRejected = "Rejected"
	PhasePending  = "Pending" // admission is waiting (deferred admission)
)

// PodResult is what the agent writes to <root-dir>/kdm/pods/<namespace>_<name>_<uid>.json for each
// pod: the admission outcome and, per container, the device run options and device health. Its
// JSON form is the versioned schema of docs/pod-results.md (MarshalJSON); UnmarshalJSON also
// reads the unversioned results of earlier kdm versions.
type PodResult struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	Phase     string    `json:"phase"`
	Reason    string    `json:"reason,omitempty"`
	Message   string    `json:"message,omitempty"`
	// Warning says what kdm kept from an earlier admission instead of following the source,
	// such as a device request edited under a running pod.
	Warning string `json:"warning,omitempty"`
	// Conflicts are the devices that this pod's restored assignment shares with other pods'
	// (devicemanager.Contest): each stays assigned to every claimant and is given to no other
	// pod until one claimant is left.
	Conflicts  []DeviceConflict  `json:"conflicts,omitempty"`
	Updated    time.Time         `json:"updated"`
	Containers []ContainerResult `json:"containers,omitempty"`
	// Runtime is what runs of the pod: its containers' states as the container runtime
	// reports them, or, when kdm runs no containers, a plain statement of that. Absent in
	// results written before kdm could run containers.
	Runtime *RuntimeStatus `json:"runtime,omitempty"`
	// Terminating is set from the pod's removal from its source until the container runtime
	// confirms that none of its containers and not its sandbox are left; its devices are held
	// until then. Nil for a pod that is not being stopped.
	Terminating *Termination `json:"terminating,omitempty"`
}

// Termination says since when a removed pod's containers are being stopped, and with what grace
// period (the kubelet's deletionTimestamp and deletionGracePeriodSeconds).
type Termination struct {
	// Since is when kdm saw the pod removed and asked the runtime to stop it.
	Since time.Time `json:"since"`
	// GracePeriodSeconds is how long each container has between SIGTERM and SIGKILL: the pod's
	// terminationGracePeriodSeconds. Nil when kdm does not know the pod's spec (it was removed
	// while kdm was down): the runtime then uses the grace period recorded on each container.
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`
}

// DeviceConflict is one device that the pod and other pods claim (see PodResult.Conflicts).
type DeviceConflict struct {
	Resource string `json:"resource"`
	DeviceID string `json:"deviceID"`
	// Pods are the other claimants: namespace/name, or the UID of a pod the agent does not
	// know.
	Pods []string `json:"pods"`
}

// ConflictWarning says what the pod's conflicts mean and how an operator ends them; empty
// without conflicts.
func (r *PodResult) ConflictWarning() string {
	if len(r.Conflicts) == 0 {
		return ""
	}
	parts := make([]string, 0, len(r.Conflicts))
	for _, c := range r.Conflicts {
		parts = append(parts, fmt.Sprintf("%s %s is also claimed by %s", c.Resource, c.DeviceID, strings.Join(c.Pods, ", ")))
	}
	return "restored records disagree: " + strings.Join(parts, "; ") +
		". The device stays with these pods and goes to no other; delete the pod that should not hold it."
}

// PodOf rebuilds the identifying part of a pod (namespace, name, UID) from its result, with its
// containers' names (init containers and sidecars as such) and, for a terminating pod, its
// grace period: enough for Path and Write, and for podresources to list the devices of a pod
// known only from its result (one removed while kdm was down).
func PodOf(r *PodResult) *v1.Pod {
	p := &v1.Pod{}
	p.Namespace, p.Name, p.UID = r.Namespace, r.Name, r.UID
	for _, c := range r.Containers {
		if !c.Init {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c.Name})
			continue
		}
		ic := v1.Container{Name: c.Name}
		if c.Sidecar {
			always := v1.ContainerRestartPolicyAlways
			ic.RestartPolicy = &always
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, ic)
	}
	if r.Terminating != nil && r.Terminating.GracePeriodSeconds != nil {
		grace := *r.Terminating.GracePeriodSeconds
		p.Spec.TerminationGracePeriodSeconds = &grace
	}
	return p
}

// ContainerResult is one container's devices as the runtime would receive them. Its JSON form
// is the kdm.io/v1 schema of docs/pod-results.md (MarshalJSON).
type ContainerResult struct {
	Name       string
	Init       bool
	Sidecar    bool
	RunOptions *devicemanager.RunContainerOptions
	// AllocatedResourcesStatus is the health of the container's devices, as the kubelet
	// reports it in the Pod's status.
	AllocatedResourcesStatus []v1.ResourceStatus
	// Requests are the container's device requests (extended-resource limits) as admitted.
	Requests map[string]int64
	// Allocations are the container's devices as the checkpoint holds them: kdm's second copy,
	// from which assignments are restored when the checkpoint is lost.
	Allocations []Allocation
}

// Allocation is one resource's devices of one container, with the NUMA nodes recorded at
// allocation time and the plugin's Allocate response (protobuf bytes), in the checkpoint's
// form. Its JSON form lists each device once with its NUMA nodes and the response as plain
// JSON (docs/pod-results.md).
type Allocation struct {
	Resource  string
	DeviceIDs checkpoint.DevicesPerNUMA
	AllocResp []byte
}

// AllocationsOf converts a container's checkpoint entries to the result's form.
func AllocationsOf(entries []checkpoint.PodDevicesEntry) []Allocation {
	var out []Allocation
	for _, e := range entries {
		out = append(out, Allocation{Resource: e.ResourceName, DeviceIDs: e.DeviceIDs, AllocResp: e.AllocResp})
	}
	return out
}

// Devices returns the container's device IDs per resource, sorted, each listed once.
func (c ContainerResult) Devices() map[string][]string {
	out := map[string][]string{}
	for _, a := range c.Allocations {
		seen := map[string]bool{}
		for _, ids := range a.DeviceIDs {
			for _, id := range ids {
				if !seen[id] {
					seen[id] = true
					out[a.Resource] = append(out[a.Resource], id)
				}
			}
		}
		sort.Strings(out[a.Resource])
	}
	return out
}

// UnhealthyDevices returns the IDs AllocatedResourcesStatus says are Unhealthy, sorted; nil
// when none is.
func (c ContainerResult) UnhealthyDevices() []string {
	var out []string
	for _, rs := range c.AllocatedResourcesStatus {
		for _, h := range rs.Resources {
			if h.Health == v1.ResourceHealthStatusUnhealthy {
				out = append(out, string(h.ResourceID))
			}
		}
	}
	slices.Sort(out)
	return out
}

// Package statusapi is kdm's HTTP server: the health endpoints (/healthz, /livez, /readyz),
// /metrics, /status (NodeStatus) and the status page (/, its assets under /ui/, /api/state and
// the /api/stream of PageState). It holds no node state of its own: a Source (the agent) gives
// the states and the checks, and Serve serves them within bounds (Limits) that no client can
// push past.
package statusapi

import (
	"github.com/kdm-project/kdm/agent/podresult"
)

// NodeStatus is what /status serves: the device resources as the kubelet would publish them
// in the Node's status, and the pods' admission outcomes.
type NodeStatus struct {
	Capacity    map[string]int64       `json:"capacity"`
	Allocatable map[string]int64       `json:"allocatable"`
	Removed     []string               `json:"removed,omitempty"`
	Pods        []*podresult.PodResult `json:"pods"`
	// Runtime says whether kdm runs the pods' containers, and through which runtime.
	Runtime RuntimeInfo `json:"runtime"`
}

// RuntimeInfo says, in /status and on the page, whether kdm runs containers.
type RuntimeInfo struct {
	// ContainersRun is true when kdm runs admitted pods' containers.
	ContainersRun bool `json:"containersRun"`
	// Endpoint is the container runtime's CRI endpoint.
	Endpoint string `json:"endpoint,omitempty"`
	// Name and Version are the runtime's, as it reports them once connected.
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
	// Message says plainly what runs.
	Message string `json:"message"`
}

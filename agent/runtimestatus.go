package agent

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

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

// containerStateText is a container state in a few words: "running", "waiting:
// ContainerCreating", "exited 0 (Completed)".
func containerStateText(st v1.ContainerState) string {
	switch {
	case st.Running != nil:
		return "running"
	case st.Terminated != nil:
		text := fmt.Sprintf("exited %d", st.Terminated.ExitCode)
		if st.Terminated.Reason != "" {
			text += " (" + st.Terminated.Reason + ")"
		}
		return text
	case st.Waiting != nil && st.Waiting.Reason != "":
		return "waiting: " + st.Waiting.Reason
	default:
		return "waiting"
	}
}

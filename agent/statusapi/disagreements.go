package statusapi

// PageDisagreement is one container's resource for which the checkpoint read at start and
// kdm's own pod record disagreed (devicemanager.RecordDisagreement), as a stale checkpoint put
// in place while kdm was down makes them.
type PageDisagreement struct {
	// Pod is namespace/name, or the pod UID for a pod the agent does not know.
	Pod       string `json:"pod"`
	Container string `json:"container"`
	Resource  string `json:"resource"`
	// Recorded are the devices the pod's record names; Checkpointed those the checkpoint
	// named for the same container (none: the checkpoint did not have it).
	Recorded     []string `json:"recorded"`
	Checkpointed []string `json:"checkpointed,omitempty"`
	// HeldByOthers are the pods to which the checkpoint gave some of the recorded devices.
	HeldByOthers []string `json:"heldByOthers,omitempty"`
	// Kept is true when the recorded devices were kept for the pod (policy kdm), false when
	// the checkpoint was followed, as the kubelet does.
	Kept bool `json:"kept"`
}

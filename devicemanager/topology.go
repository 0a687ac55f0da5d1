package devicemanager

import "github.com/kdm-project/kdm/internal/state"

// TopologyHint is a set of NUMA nodes a container's devices may come from, and whether that
// set is as small as the resource allows. A nil NUMANodes means "no preference".
type TopologyHint = state.TopologyHint

// AffinityStore supplies the NUMA affinity chosen for a container (the topology manager's
// decision). The manager prefers devices on those nodes. GetAffinity is called without the
// manager's lock held, from Allocate's goroutine: it may call back into the manager.
type AffinityStore interface {
	GetAffinity(podUID, containerName string) TopologyHint
}

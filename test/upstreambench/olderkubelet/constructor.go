//go:build olderkubelet

package olderkubelet

import (
	_ "unsafe" // go:linkname

	"k8s.io/klog/v2"
	kubeletdm "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
)

// NewKubeletManager builds the kubelet's device manager serving socketPath, as the parent
// module's NewKubeletManager does for the newest kubelet: the kubelet's unexported
// newManagerImpl, reached with go:linkname. The declaration below must match that function's
// signature in every release a per-minor module pins (the same from v1.35 to v1.36); the
// linker does not check it. TestKubeletConstructor fails if the function stops behaving as
// expected. The machine topology is always nil: the benchmarks' devices carry none.
func NewKubeletManager(logger klog.Logger, socketPath string, store topologymanager.Store) (*kubeletdm.ManagerImpl, error) {
	return newManagerImpl(logger, socketPath, nil, store)
}

// machineNode stands in for cadvisor's Node (github.com/google/cadvisor/info/v1) in the
// declaration below. Only a nil slice is passed, and a nil slice is the same three words
// whatever its element type. Naming cadvisor's type would make this package import it, and
// `go mod tidy` of the parent module, which reads every build tag, would then require
// cadvisor's info package and the gRPC version it wants in the parent's graph, which never
// builds this package.
type machineNode struct{}

// newManagerImpl is pkg/kubelet/cm/devicemanager.newManagerImpl. The empty
// constructor.s lets the compiler accept a declaration without a body.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []machineNode, store topologymanager.Store) (*kubeletdm.ManagerImpl, error)

//go:build olderkubelet

package olderkubelet

import (
	_ "unsafe" // go:linkname

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"k8s.io/klog/v2"
	kubeletdm "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
)

// NewKubeletManager builds the kubelet's device manager serving socketPath, as the parent
// module's NewKubeletManager does for the newest kubelet: the kubelet's unexported
// newManagerImpl, reached with go:linkname. The declaration below must match that function's
// signature in every release a per-minor module pins (the same from v1.35 to v1.36); the
// linker does not check it. TestKubeletConstructor fails if the function stops behaving as
// expected.
func NewKubeletManager(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, store topologymanager.Store) (*kubeletdm.ManagerImpl, error) {
	return newManagerImpl(logger, socketPath, topology, store)
}

// newManagerImpl is pkg/kubelet/cm/devicemanager.newManagerImpl. The empty
// kubelet_constructor.s lets the compiler accept a declaration without a body.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, store topologymanager.Store) (*kubeletdm.ManagerImpl, error)

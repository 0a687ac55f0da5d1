// Package kubelet136 runs the upstreambench benchmarks on the kubelet v1.36 device manager
// (k8s.io/kubernetes v1.36.3, pkg/kubelet/cm/devicemanager), in a module of its own; see the
// parent module's README.
package kubelet136

import (
	_ "unsafe" // go:linkname

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"k8s.io/klog/v2"
	kubeletdm "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
)

// NewKubeletManager builds the kubelet's device manager serving socketPath, as the parent
// module's NewKubeletManager does for the kubelet v1.37: the kubelet's unexported
// newManagerImpl, reached with go:linkname. The declaration below must match that function's
// signature in the k8s.io/kubernetes version go.mod pins (v1.36.3); the linker does not check
// it. TestKubeletConstructor fails if the function stops behaving as expected.
func NewKubeletManager(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, store topologymanager.Store) (*kubeletdm.ManagerImpl, error) {
	return newManagerImpl(logger, socketPath, topology, store)
}

// newManagerImpl is pkg/kubelet/cm/devicemanager.newManagerImpl. The empty
// kubelet_constructor.s lets the compiler accept a declaration without a body.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, store topologymanager.Store) (*kubeletdm.ManagerImpl, error)

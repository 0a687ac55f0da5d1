package upstreambench

import (
	_ "unsafe" // go:linkname

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"k8s.io/klog/v2"
	kubeletdm "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
)

// NewKubeletManager builds the kubelet's device manager serving socketPath (a kubelet.sock
// in a directory the caller owns; the checkpoint goes next to it), exactly as the kubelet's
// NewManagerImpl does for /var/lib/kubelet/device-plugins/kubelet.sock.
//
// It is the kubelet's unexported newManagerImpl, reached with go:linkname: NewManagerImpl
// only fills in the fixed socket path and calls it. The declaration below must match that
// function's signature in the k8s.io/kubernetes version go.mod pins (the newest kubelet row's); the linker
// does not check it, so a version bump must re-read pkg/kubelet/cm/devicemanager/manager.go.
// TestKubeletConstructor fails if the function stops behaving as expected.
func NewKubeletManager(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, store topologymanager.Store) (*kubeletdm.ManagerImpl, error) {
	return newManagerImpl(logger, socketPath, topology, store)
}

// newManagerImpl is pkg/kubelet/cm/devicemanager.newManagerImpl. The empty
// kubelet_constructor.s lets the compiler accept a declaration without a body.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, store topologymanager.Store) (*kubeletdm.ManagerImpl, error)

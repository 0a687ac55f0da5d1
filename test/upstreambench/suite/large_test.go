package suite

import (
	"testing"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestKubeletMaxDevices checks that KubeletMaxDevices is the largest list that fits the
// kubelet's receive limit.
func TestKubeletMaxDevices(t *testing.T) {
	n := KubeletMaxDevices()
	size := func(n int) int { return proto.Size(&pluginapi.ListAndWatchResponse{Devices: DeviceList(n)}) }
	if got := size(n); got > KubeletRecvLimit {
		t.Errorf("%d devices encode to %d bytes, over the limit of %d", n, got, KubeletRecvLimit)
	}
	if got := size(n + 1); got <= KubeletRecvLimit {
		t.Errorf("%d devices encode to %d bytes, within the limit of %d: %d is not the largest", n+1, got, KubeletRecvLimit, n)
	}
}

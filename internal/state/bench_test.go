package state

import (
	"fmt"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// largeList returns n healthy devices, each sent as a separate message would decode them.
func largeList(n int) []*pluginapi.Device {
	devs := make([]*pluginapi.Device, n)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: fmt.Sprintf("dev-%d", i), Health: pluginapi.Healthy}
	}
	return devs
}

// BenchmarkLargeDeviceList measures the core's work for a plugin with a million devices:
// its first list with the checkpoint content that follows; a list flipping one device's
// health, twice, with the checkpoint content after each; and picking one device for a
// container.
func BenchmarkLargeDeviceList(b *testing.B) {
	const n = 1_000_000
	devs := largeList(n)
	// listed is a state whose resource "r" lists devs, with its checkpoint content made.
	listed := func() *State {
		s := New(Options{})
		s.Connect("r")
		s.ApplyDeviceList("r", devs)
		s.Prepared()
		return s
	}
	b.Run("first-list", func(b *testing.B) {
		for b.Loop() {
			listed()
		}
	})
	b.Run("health-flip", func(b *testing.B) {
		s := listed()
		flipped := append([]*pluginapi.Device(nil), devs...)
		flipped[n/2] = &pluginapi.Device{ID: devs[n/2].ID, Health: pluginapi.Unhealthy}
		for b.Loop() {
			s.ApplyDeviceList("r", flipped)
			s.Prepared()
			s.ApplyDeviceList("r", devs)
			s.Prepared()
		}
	})
	b.Run("select-one", func(b *testing.B) {
		s := New(Options{})
		s.Connect("r")
		s.ApplyDeviceList("r", devs)
		for b.Loop() {
			// A plugin without GetPreferredAllocation: the manager passes no PreferredFunc.
			ids, _, err := s.Select(Request{PodUID: "p", Container: "c", Resource: "r", Required: 1, SourcesReady: true}, nil)
			if err != nil || ids.Len() != 1 {
				b.Fatalf("Select: %v %v", ids, err)
			}
			s.release("r", ids)
		}
	})
}

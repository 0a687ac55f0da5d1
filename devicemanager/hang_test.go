package devicemanager

import (
	"context"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin/plugintest"
)

// TestHungPluginDoesNotBlockOthers: while one plugin hangs in Allocate, pods asking for another
// resource are admitted (no lock is held across the RPC), and the Allocate deadline ends the
// hung admission with an error that leaves nothing reserved.
func TestHungPluginDoesNotBlockOthers(t *testing.T) {
	f := newAllocFixture(t, Config{Policy: Policy{AllocateTimeout: 5 * time.Second}})
	hung := f.plugin("example.com/slow", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "s0"))
	f.plugin("example.com/fast", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "f0"))
	hung.SetFaults(plugintest.Faults{HangAllocate: true})

	stuck := make(chan error, 1)
	go func() { stuck <- f.admit(testPod("stuck", container("c", map[string]int64{"example.com/slow": 1}))) }()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := hung.WaitForCalls(ctx, func(c plugintest.Calls) bool { return len(c.Allocate) == 1 }); err != nil {
		t.Fatalf("the slow plugin never saw Allocate: %v", err)
	}
	if err := f.admit(testPod("other", container("c", map[string]int64{"example.com/fast": 1}))); err != nil {
		t.Fatalf("a pod for another resource was not admitted while a plugin hangs: %v", err)
	}
	select {
	case err := <-stuck:
		t.Fatalf("the hung admission finished before its deadline: %v", err)
	default:
	}
	if err := <-stuck; err == nil {
		t.Fatalf("the hung admission succeeded")
	}
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if n := f.m.st.Reservations(); n != 0 {
		t.Fatalf("the timed-out admission left %d reservations", n)
	}
}

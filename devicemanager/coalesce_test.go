package devicemanager

import (
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestCoalescedWriteRunsOnTheManagersClock: with CoalesceDeviceListWrites, a device-list change
// reaches the checkpoint when the manager's clock passes the coalescing window, not before,
// whatever the wall clock does.
func TestCoalescedWriteRunsOnTheManagersClock(t *testing.T) {
	dir := shortDir(t)
	clk := clocktesting.NewFakeClock(time.Now())
	m := testManager(t, dir, Config{Clock: clk, Policy: Policy{CoalesceDeviceListWrites: true}}, Sources{})
	testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
	waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, 2, 2) })
	registered := func() []string {
		data, _, err := m.store.Read()
		if err != nil {
			return nil
		}
		return data.RegisteredDevices[gpu]
	}
	poll(t, "the coalescing timer", clk.HasWaiters)
	time.Sleep(2 * coalesceWindow) // wall time passes; the manager's clock does not
	if got := registered(); len(got) != 0 {
		t.Fatalf("checkpoint registers %v before the window passed on the manager's clock", got)
	}
	clk.Step(coalesceWindow)
	poll(t, "the coalesced write", func() bool { return len(registered()) == 2 })
}

// poll waits for a condition no manager event announces (a timer armed, a file written),
// checking every millisecond, and fails the test after waitTimeout.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

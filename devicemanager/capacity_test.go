package devicemanager

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/checkpoint"
)

// TestUpdateCapacityAllocatable walks the capacity rules of a live plugin: health changes,
// removals, a second resource, disconnect, grace expiry, and a restart from the checkpoint.
func TestUpdateCapacityAllocatable(t *testing.T) {
	dir := shortDir(t)
	clk := clocktesting.NewFakeClock(time.Now())
	m := testManager(t, dir, Config{Clock: clk}, Sources{})
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{},
		append(devices(pluginapi.Healthy, "d1", "d2"), devices(pluginapi.Unhealthy, "d3")...))
	step := func(what string, c, a int64) {
		t.Helper()
		waitFor(t, m, what, func() bool { return capacityIs(m, gpu, c, a) })
	}
	step("2 healthy + 1 unhealthy", 3, 2)

	p.SetDevices(devices(pluginapi.Healthy, "d1", "d2"))
	step("unhealthy device removed", 2, 2)

	p.SetDevices(append(devices(pluginapi.Healthy, "d1"), devices(pluginapi.Unhealthy, "d2", "d3")...))
	step("healthy device turned unhealthy, one re-added unhealthy", 3, 1)

	p.SetDevices(devices(pluginapi.Unhealthy, "d2", "d3"))
	step("healthy device removed", 2, 0)

	nic := "example.com/nic"
	testPlugin(t, dir, nic, "nic.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "n1"))
	waitFor(t, m, "second resource", func() bool { return capacityIs(m, nic, 1, 1) })

	// Disconnect: the endpoint gets a stop time, devices turn unhealthy, capacity stays.
	p.SetDevices(devices(pluginapi.Healthy, "d1", "d2", "d3"))
	step("all healthy", 3, 3)
	p.Stop()
	step("plugin gone: capacity kept, allocatable 0", 3, 0)
	m.mu.Lock()
	ep := m.endpoints[gpu].ep
	m.mu.Unlock()
	if !ep.IsStopped() || !ep.StopTime().Equal(clk.Now()) {
		t.Fatalf("disconnected endpoint: stopped=%v stopTime=%v, want stopped at %v", ep.IsStopped(), ep.StopTime(), clk.Now())
	}
	if _, err := ep.Allocate(context.Background(), []string{"d1"}); err == nil {
		t.Fatalf("Allocate on a stopped endpoint succeeded")
	}

	// Exactly the grace period: still there. One tick more: removed from everything.
	clk.Step(DefaultGracePeriod)
	if _, _, removed := m.GetCapacity(); len(removed) != 0 {
		t.Fatalf("removed %v at exactly the grace period", removed)
	}
	clk.Step(time.Nanosecond)
	c, a, removed := m.GetCapacity()
	if len(removed) != 1 || removed[0] != gpu {
		t.Fatalf("removed %v, want [%s]", removed, gpu)
	}
	if quantity(c, gpu) != -1 || quantity(a, gpu) != -1 {
		t.Fatalf("expired resource still reported: capacity %v allocatable %v", c, a)
	}
	m.mu.Lock()
	_, e := m.endpoints[gpu]
	h, u := m.st.Healthy(gpu) != nil, m.st.Unhealthy(gpu) != nil
	m.mu.Unlock()
	if e || h || u {
		t.Fatalf("expired resource left in maps: endpoint=%v healthy=%v unhealthy=%v", e, h, u)
	}
	if quantity(c, nic) != 1 {
		t.Fatalf("the other resource was affected: %v", c)
	}

	// The checkpoint records the live resource; a new manager restores it stopped, at 0/0.
	data, _, err := m.store.Read()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := data.RegisteredDevices[nic]; !ok || len(data.RegisteredDevices) != 1 {
		t.Fatalf("checkpoint registered devices %v, want only %s", data.RegisteredDevices, nic)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	m2 := testManager(t, dir, Config{Clock: clk}, Sources{})
	if !capacityIs(m2, nic, 0, 0) {
		c, a, _ := m2.GetCapacity()
		t.Fatalf("restored resource: capacity %v allocatable %v, want 0/0", c, a)
	}
	m2.mu.Lock()
	plugin := m2.st.IsDevicePluginResource(nic)
	stopped := m2.endpoints[nic].ep.IsStopped()
	m2.mu.Unlock()
	if !plugin || !stopped {
		t.Fatalf("restored resource: device-plugin resource=%v stopped=%v", plugin, stopped)
	}
}

// TestEndpointSyncOnDisconnect: disconnect keeps the endpoint and the keys; grace expiry
// removes endpoint, healthy and unhealthy entries together.
func TestEndpointSyncOnDisconnect(t *testing.T) {
	dir := shortDir(t)
	clk := clocktesting.NewFakeClock(time.Now())
	m := testManager(t, dir, Config{Clock: clk, GracePeriod: time.Minute}, Sources{})
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "a", "b"))
	waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, 2, 2) })
	p.Stop()
	waitFor(t, m, "disconnect", func() bool { return capacityIs(m, gpu, 2, 0) })
	m.mu.Lock()
	if _, ok := m.endpoints[gpu]; !ok || m.st.Healthy(gpu) == nil || m.st.Unhealthy(gpu).Len() != 2 {
		t.Errorf("after disconnect: endpoint present=%v healthy=%v unhealthy=%v", ok, m.st.Healthy(gpu), m.st.Unhealthy(gpu))
	}
	m.mu.Unlock()
	clk.Step(time.Minute + time.Second)
	m.GetCapacity()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.endpoints)+len(m.st.Listed()) != 0 || m.st.Plugin(gpu).Known {
		t.Errorf("after expiry: endpoints=%v resources with devices=%v", m.endpoints, m.st.Listed())
	}
}

func TestGetAllocatableDevicesMultipleResources(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	testPlugin(t, dir, "example.com/r1", "r1.sock", &pluginapi.DevicePluginOptions{},
		append(devices(pluginapi.Healthy, "a1", "a2"), devices(pluginapi.Unhealthy, "a3")...))
	testPlugin(t, dir, "example.com/r2", "r2.sock", &pluginapi.DevicePluginOptions{},
		append(devices(pluginapi.Unhealthy, "b1"), devices(pluginapi.Healthy, "b2")...))
	waitFor(t, m, "both resources", func() bool {
		return capacityIs(m, "example.com/r1", 3, 2) && capacityIs(m, "example.com/r2", 2, 1)
	})
	got := m.GetAllocatableDevices()
	if len(got["example.com/r1"]) != 2 || got["example.com/r1"]["a3"] != nil || len(got["example.com/r2"]) != 1 || got["example.com/r2"]["b2"] == nil {
		t.Fatalf("allocatable devices %v: want healthy only (a1 a2; b2)", got)
	}
}

func TestGetAllocatableDevicesHealthTransition(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{},
		append(devices(pluginapi.Healthy, "a"), devices(pluginapi.Unhealthy, "b")...))
	waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, 2, 1) })
	if got := m.GetAllocatableDevices()[gpu]; got["b"] != nil {
		t.Fatalf("unhealthy device b allocatable: %v", got)
	}
	if err := p.SetHealth("b", pluginapi.Healthy); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "b healthy", func() bool { return capacityIs(m, gpu, 2, 2) })
	if got := m.GetAllocatableDevices()[gpu]; got["b"] == nil {
		t.Fatalf("healthy device b not allocatable: %v", got)
	}
}

func TestResetExtendedResource(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "a"))
	waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, 1, 1) })
	waitFor(t, m, "checkpoint after a device list", func() bool {
		_, err := os.Stat(filepath.Join(dir, checkpoint.FileName))
		return err == nil
	})
	if m.ShouldResetExtendedResourceCapacity() {
		t.Fatalf("reset requested while a checkpoint exists")
	}
	p.Stop()
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if !m.ShouldResetExtendedResourceCapacity() {
		t.Fatalf("no reset requested for an empty plugin directory")
	}
}

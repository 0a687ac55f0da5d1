package devicemanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
	"github.com/kdm-project/kdm/endpoint"
)

// TestManagerRestart: manager A with a plugin and a checkpoint stops; manager B on the same
// dir reports 0/0 for the checkpointed resource until the plugin re-registers by itself (it
// sees the new kubelet.sock), then the full count again; the pod keeps its devices.
func TestManagerRestart(t *testing.T) {
	dir := shortDir(t)
	clk := clocktesting.NewFakeClock(time.Now())
	pods := newPodList()
	a := testManager(t, dir, Config{Clock: clk}, Sources{ActivePods: pods.active})
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2", "g3"), envAllocator("GPU"))
	waitFor(t, a, "devices", func() bool { return capacityIs(a, gpu, 3, 3) })
	pod := testPod("p1", container("c", map[string]int64{gpu: 2}))
	pods.add(pod)
	if err := a.Allocate(context.Background(), pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	before := a.GetDevices("p1", "c")
	// Hold the plugin's re-registration (its options call hangs until the restarted
	// manager's short options deadline) so that the state before it can be checked: the
	// plugin would otherwise be back within milliseconds.
	p.SetFaults(plugintest.Faults{HangOptions: true})
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	regs := p.Registrations()

	b := testManager(t, dir, Config{Clock: clk, Endpoint: endpoint.Config{OptionsTimeout: 300 * time.Millisecond}},
		Sources{ActivePods: pods.active})
	if !capacityIs(b, gpu, 0, 0) {
		c, al, _ := b.GetCapacity()
		t.Fatalf("restarted manager before re-registration: %v / %v, want 0/0", c, al)
	}
	if got := b.GetDevices("p1", "c"); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("restored assignment %v, want %v", got, before)
	}
	p.SetFaults(plugintest.Faults{})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := p.WaitForRegistrations(ctx, regs+1); err != nil {
		t.Fatalf("plugin did not re-register by itself: %v", err)
	}
	waitFor(t, b, "capacity back", func() bool { return capacityIs(b, gpu, 3, 3) })
	// The pod re-admitted after the restart keeps its cached devices without a new Allocate.
	allocs := len(p.Calls().Allocate)
	if err := b.Allocate(context.Background(), pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatalf("re-admission of the running pod: %v", err)
	}
	if len(p.Calls().Allocate) != allocs {
		t.Fatalf("re-admission called Allocate again")
	}
}

// TestRestartWithoutPlugin: the checkpointed resource stays at 0 until the grace period
// passes on the fake clock, then it is removed.
func TestRestartWithoutPlugin(t *testing.T) {
	dir := shortDir(t)
	clk := clocktesting.NewFakeClock(time.Now())
	a := testManager(t, dir, Config{Clock: clk}, Sources{})
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1"))
	waitFor(t, a, "devices", func() bool { return capacityIs(a, gpu, 1, 1) })
	p.Stop()
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	b := testManager(t, dir, Config{Clock: clk}, Sources{})
	if !capacityIs(b, gpu, 0, 0) {
		t.Fatalf("restored resource not at 0/0")
	}
	clk.Step(DefaultGracePeriod)
	if !capacityIs(b, gpu, 0, 0) {
		t.Fatalf("resource removed before the grace period ended")
	}
	clk.Step(time.Millisecond)
	if _, _, removed := b.GetCapacity(); len(removed) != 1 || removed[0] != gpu {
		t.Fatalf("removed %v after the grace period, want [%s]", removed, gpu)
	}
	if !capacityIs(b, gpu, -1, -1) {
		t.Fatalf("resource still reported after removal")
	}
}

// TestPluginDiesMidStream: the stream ending marks the devices unhealthy; the plugin's
// restart brings them back.
func TestPluginDiesMidStream(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
	waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, 2, 2) })
	p.DropStreams()
	waitFor(t, m, "disconnect", func() bool { return capacityIs(m, gpu, 2, 0) })
	p.Stop()
	testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
	waitFor(t, m, "plugin back", func() bool { return capacityIs(m, gpu, 2, 2) })
}

// TestRacingInstances: two instances of a plugin register in turn; capacity never dips to 0,
// and the survivor keeps streaming after the first instance dies.
func TestRacingInstances(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	old := testPlugin(t, dir, gpu, "old.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
	waitFor(t, m, "old instance", func() bool { return capacityIs(m, gpu, 2, 2) })
	survivor := testPlugin(t, dir, gpu, "new.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
	waitFor(t, m, "new instance current", func() bool { return m.currentSocket(gpu) == survivor.SocketPath() })
	if !capacityIs(m, gpu, 2, 2) {
		t.Fatalf("capacity dipped when the second instance registered")
	}
	old.DropStreams()
	old.Stop()
	// The survivor's updates still arrive, and nothing marked its devices unhealthy.
	if err := survivor.SetHealth("g2", pluginapi.Unhealthy); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "survivor update", func() bool { return capacityIs(m, gpu, 2, 1) })
	m.mu.Lock()
	stopped := m.endpoints[gpu].ep.IsStopped()
	m.mu.Unlock()
	if stopped {
		t.Fatalf("the old instance's exit stopped the survivor's endpoint")
	}
}

// TestUnusualDeviceLists: control characters in IDs, 100,000 devices in one message, and an
// empty list.
func TestUnusualDeviceLists(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	weird := devices(pluginapi.Healthy, "a\x00b", "tab\there", "nl\n", "quote\"", "ünï")
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, weird)
	waitFor(t, m, "weird IDs", func() bool { return capacityIs(m, gpu, 5, 5) })
	if got := m.GetAllocatableDevices()[gpu]; got["a\x00b"] == nil || got["nl\n"] == nil {
		t.Fatalf("IDs with control characters lost: %v", got)
	}
	waitFor(t, m, "checkpoint with control characters", func() bool {
		data, _, err := m.store.Read()
		return err == nil && len(data.RegisteredDevices[gpu]) == 5
	})

	p.SetDevices(devices(pluginapi.Healthy, ids("dev-", 100000)...))
	waitFor(t, m, "100,000 devices", func() bool { return capacityIs(m, gpu, 100000, 100000) })

	p.SetDevices(nil)
	waitFor(t, m, "empty list", func() bool { return capacityIs(m, gpu, 0, 0) })
}

// TestRestartWritesTheSameCheckpoint: a manager restarted on its own checkpoint, whose plugin
// comes back with the same devices, writes a file of the same data, in the same order, that
// verifies. The entries it read (Store.ReadEntries) are kept for that write; an entry encoded
// or hashed wrongly would change the checksum.
func TestRestartWritesTheSameCheckpoint(t *testing.T) {
	dir := shortDir(t)
	pods := newPodList()
	a := testManager(t, dir, Config{}, Sources{ActivePods: pods.active})
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{},
		devices(pluginapi.Healthy, "g1", "g2", "g3", "g4", "g5", "g6"), envAllocator("GPU"))
	waitFor(t, a, "devices", func() bool { return capacityIs(a, gpu, 6, 6) })
	for i := range 3 {
		pod := testPod(fmt.Sprintf("p%d", i), container("c", map[string]int64{gpu: 2}))
		pods.add(pod)
		if err := a.Allocate(context.Background(), pod, &pod.Spec.Containers[0]); err != nil {
			t.Fatal(err)
		}
	}
	a.WaitForCheckpointWrites()
	path := filepath.Join(dir, checkpoint.FileName)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	regs := p.Registrations()
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}

	b := testManager(t, dir, Config{}, Sources{ActivePods: pods.active})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := p.WaitForRegistrations(ctx, regs+1); err != nil {
		t.Fatalf("plugin did not re-register: %v", err)
	}
	waitFor(t, b, "capacity back", func() bool { return capacityIs(b, gpu, 6, 6) })
	b.WaitForCheckpointWrites()
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := checkpoint.Decode(after)
	if err != nil {
		t.Fatalf("checkpoint after the restart: %v", err)
	}
	want, _, err := checkpoint.Decode(before)
	if err != nil {
		t.Fatalf("checkpoint before the restart: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("checkpoint after the restart holds other data (-before +after):\n%s", diff)
	}
}

// TestCallsAfterStartSeeTheRestoredState: Start returns while the checkpoint it read is still
// being restored; held there by a test hook, capacity, a restored pod's devices and a plugin's
// Register all wait for the restore, and none sees the state before it.
func TestCallsAfterStartSeeTheRestoredState(t *testing.T) {
	dir := shortDir(t)
	store, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Write(&checkpoint.Data{
		PodDeviceEntries: []checkpoint.PodDevicesEntry{{PodUID: "p1", ContainerName: "c", ResourceName: gpu,
			DeviceIDs: checkpoint.DevicesPerNUMA{-1: {"g1"}}, AllocResp: []byte{}}},
		RegisteredDevices: map[string][]string{gpu: {"g1", "g2"}},
	}); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{PluginDir: dir, Logger: ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))),
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	release, restoring := make(chan struct{}), make(chan struct{})
	m.testHookRestoring = func() {
		close(restoring)
		<-release
	}
	if err := m.Start(context.Background(), Sources{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop() })
	<-restoring

	seen := make(chan string, 2)
	go func() {
		c, a, _ := m.GetCapacity()
		seen <- fmt.Sprintf("capacity %d allocatable %d", quantity(c, gpu), quantity(a, gpu))
	}()
	go func() { seen <- fmt.Sprintf("devices %v", m.GetDevices("p1", "c")[gpu]) }()
	p, err := plugintest.New(deviceplugin.Config{ResourceName: gpu, PluginDir: dir, SocketName: "gpu.sock",
		Options: &pluginapi.DevicePluginOptions{}, Devices: devices(pluginapi.Healthy, "g1", "g2"),
		Logger: ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1)))})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- p.Start(context.Background()) }() // registers: waits for the restore
	t.Cleanup(p.Stop)
	close(release)
	for _, want := range []map[string]bool{
		{"capacity 0 allocatable 0": true, "capacity 2 allocatable 2": true, "devices map[g1:[]]": true},
		{"capacity 0 allocatable 0": true, "capacity 2 allocatable 2": true, "devices map[g1:[]]": true},
	} {
		if got := <-seen; !want[got] {
			t.Errorf("a call made during the restore saw %q, not the restored state", got)
		}
	}
	if err := <-started; err != nil {
		t.Fatalf("plugin Start: %v", err)
	}
	waitFor(t, m, "the plugin's devices", func() bool { return capacityIs(m, gpu, 2, 2) })
	if got := fmt.Sprint(m.GetDevices("p1", "c")[gpu]); got != "map[g1:[]]" {
		t.Errorf("after the plugin registered, the restored pod holds %s, want map[g1:[]]", got)
	}
}

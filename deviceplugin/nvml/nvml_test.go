package nvml

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/devicemanager"

	"github.com/kdm-project/kdm/internal/sockdir"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// shortDir is a directory short enough for unix socket paths.
var shortDir = sockdir.New

func mockPlugin(t *testing.T, mutate ...func(*Config)) *Plugin {
	t.Helper()
	cfg := Config{Mock: MockDGXA100, PluginDir: shortDir(t), Logger: ktesting.NewLogger(t, ktesting.NewConfig())}
	for _, f := range mutate {
		f(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEnumerateMock(t *testing.T) {
	p := mockPlugin(t)
	devs := p.deviceList()
	if len(devs) != 8 {
		t.Fatalf("%d GPUs, want 8", len(devs))
	}
	again := mockPlugin(t)
	for i, d := range devs {
		if !strings.HasPrefix(d.ID, "GPU-") || d.Health != pluginapi.Healthy || d.ID != again.deviceList()[i].ID {
			t.Fatalf("GPU %d: %+v (UUIDs must be stable across plugin instances)", i, d)
		}
	}
}

// TestEnumerateMockGPUs: MockGPUs sizes the mock, with distinct UUIDs stable across instances.
func TestEnumerateMockGPUs(t *testing.T) {
	for _, n := range []int{1, 12} {
		devs := mockPlugin(t, func(c *Config) { c.MockGPUs = n }).deviceList()
		again := mockPlugin(t, func(c *Config) { c.MockGPUs = n }).deviceList()
		if len(devs) != n {
			t.Fatalf("MockGPUs %d: %d GPUs", n, len(devs))
		}
		seen := map[string]bool{}
		for i, d := range devs {
			if seen[d.ID] || d.ID != again[i].ID {
				t.Fatalf("MockGPUs %d: GPU %d %q is repeated or not stable (%q in another instance)", n, i, d.ID, again[i].ID)
			}
			seen[d.ID] = true
		}
	}
}

func TestRealLibraryAbsent(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver")
	}
	_, err := New(Config{PluginDir: shortDir(t)})
	if err == nil || !errors.Is(err, errNoLibrary) && !strings.Contains(err.Error(), "NVML") {
		t.Fatalf("New without libnvidia-ml: %v, want a clear NVML error", err)
	}
}

func TestAllocate(t *testing.T) {
	p := mockPlugin(t)
	ids := []string{p.gpus[0].UUID, p.gpus[3].UUID}
	resp, err := p.allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.ContainerResponses[0]
	if r.Envs[VisibleDevicesEnv] != strings.Join(ids, ",") {
		t.Fatalf("env %v", r.Envs)
	}
	var paths []string
	for _, d := range r.Devices {
		paths = append(paths, d.HostPath)
	}
	want := []string{"/dev/nvidia" + strconv.Itoa(p.gpus[0].Minor), "/dev/nvidia" + strconv.Itoa(p.gpus[3].Minor), "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Fatalf("device nodes (-want +got):\n%s", diff)
	}
	if _, err := p.allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-bogus"}}}}); err == nil || !strings.Contains(err.Error(), "GPU-bogus") {
		t.Fatalf("unknown GPU: %v", err)
	}

	// DeviceDir moves the host side only; the container still sees /dev.
	moved := mockPlugin(t, func(c *Config) { c.DeviceDir = "/srv/gpu-nodes" })
	resp, err = moved.allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids[:1]}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := resp.ContainerResponses[0].Devices[0]; d.HostPath != "/srv/gpu-nodes/nvidia"+strconv.Itoa(p.gpus[0].Minor) || d.ContainerPath != "/dev/nvidia"+strconv.Itoa(p.gpus[0].Minor) {
		t.Fatalf("with DeviceDir, GPU device node %+v; want the host path under /srv/gpu-nodes and the container path under /dev", d)
	}

	cdi := mockPlugin(t, func(c *Config) { c.CDI = true })
	resp, err = cdi.allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids[:1]}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.ContainerResponses[0]; len(r.Devices) != 0 || len(r.CdiDevices) != 1 || r.CdiDevices[0].Name != "nvidia.com/gpu="+ids[0] {
		t.Fatalf("CDI response %+v", r)
	}
}

func TestPreferredAllocation(t *testing.T) {
	p := mockPlugin(t)
	// Fake topology: GPUs 0-3 on node 0, 4-7 on node 1.
	for i := range p.gpus {
		p.gpus[i].NUMA = i / 4
		p.byUUID[p.gpus[i].UUID] = p.gpus[i]
	}
	u := func(is ...int) []string {
		var out []string
		for _, i := range is {
			out = append(out, p.gpus[i].UUID)
		}
		return out
	}
	cases := []struct {
		name                 string
		available, mustInclu []string
		size                 int
		want                 []string
	}{
		{"lowest index on the fullest node", u(7, 5, 1, 4), nil, 2, u(4, 5)},
		{"must include first, then its node", u(0, 1, 6, 7), u(6), 2, u(6, 7)},
		{"spill to the other node", u(2, 3, 4), u(2), 3, u(2, 3, 4)},
		{"unknown ids ignored", append(u(0), "GPU-bogus"), nil, 1, u(0)},
	}
	for _, tc := range cases {
		got := p.choose(tc.available, tc.mustInclu, tc.size)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestNUMAFromSysfs(t *testing.T) {
	root := shortDir(t)
	dev := filepath.Join(root, "bus", "pci", "devices", "0000:07:00.0")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "numa_node"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := numaNode(root, normalizeBusID("00000000:07:00.0")); got != 1 {
		t.Fatalf("NUMA node %d, want 1", got)
	}
	if got := numaNode(root, "0000:99:00.0"); got != -1 {
		t.Fatalf("missing device: %d, want -1", got)
	}
	if err := os.WriteFile(filepath.Join(dev, "numa_node"), []byte("-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := numaNode(root, "0000:07:00.0"); got != -1 {
		t.Fatalf("numa_node -1: %d", got)
	}
}

// fakeEvents delivers scripted XID events, then nothing.
type fakeEvents struct{ events chan XIDEvent }

func (f *fakeEvents) Next(ctx context.Context) (XIDEvent, bool, error) {
	select {
	case ev := <-f.events:
		return ev, true, nil
	case <-ctx.Done():
		return XIDEvent{}, false, nil
	case <-time.After(50 * time.Millisecond):
		return XIDEvent{}, false, nil
	}
}
func (f *fakeEvents) Close() {}

// runWithManager runs the plugin against a real device manager and returns the manager.
func runWithManager(t *testing.T, p *Plugin) *devicemanager.Manager {
	t.Helper()
	m, err := devicemanager.New(devicemanager.Config{PluginDir: p.cfg.PluginDir, Logger: ktesting.NewLogger(t, ktesting.NewConfig())})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background(), devicemanager.Sources{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = m.Stop()
	})
	return m
}

func allocatable(m *devicemanager.Manager) int64 {
	_, a, _ := m.GetCapacity()
	q := a["nvidia.com/gpu"]
	return q.Value()
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestXIDMarksUnhealthy(t *testing.T) {
	ev := &fakeEvents{events: make(chan XIDEvent, 4)}
	p := mockPlugin(t, func(c *Config) { c.Events = ev })
	m := runWithManager(t, p)
	eventually(t, "8 GPUs", func() bool { return allocatable(m) == 8 })
	ev.events <- XIDEvent{UUID: p.gpus[2].UUID, XID: 43} // application error: ignored
	ev.events <- XIDEvent{UUID: p.gpus[1].UUID, XID: 79} // fell off the bus
	eventually(t, "7 allocatable after XID 79", func() bool { return allocatable(m) == 7 })
	for _, d := range p.Devices() {
		want := pluginapi.Healthy
		if d.ID == p.gpus[1].UUID {
			want = pluginapi.Unhealthy
		}
		if d.Health != want {
			t.Fatalf("GPU %s is %s, want %s", d.ID, d.Health, want)
		}
	}
}

func TestHealthControlDir(t *testing.T) {
	dir := shortDir(t)
	p := mockPlugin(t, func(c *Config) { c.HealthControlDir = dir })
	sick := p.gpus[5].UUID
	if err := os.WriteFile(filepath.Join(dir, sick), []byte("Unhealthy"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := runWithManager(t, p)
	eventually(t, "the pre-existing control file applied", func() bool { return allocatable(m) == 7 })
	if err := os.Remove(filepath.Join(dir, sick)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "healthy again", func() bool { return allocatable(m) == 8 })
	if err := os.WriteFile(filepath.Join(dir, ".ignored"), []byte("Unhealthy"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.MarkUnhealthy("GPU-unknown", "test"); err == nil {
		t.Fatalf("marking an unknown GPU succeeded")
	}
}

// TestUnhealthyLoggedOncePerChange: a health control file is often written in two steps
// (truncate, write), and each one re-marks the GPU; the log names each change once.
func TestUnhealthyLoggedOncePerChange(t *testing.T) {
	buf := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	p := mockPlugin(t, func(c *Config) { c.Logger = buf })
	gpu := p.gpus[2].UUID
	count := func() int {
		return strings.Count(buf.GetSink().(ktesting.Underlier).GetBuffer().String(), "GPU marked unhealthy")
	}
	for i := 0; i < 2; i++ {
		if err := p.MarkUnhealthy(gpu, "health control file"); err != nil {
			t.Fatal(err)
		}
	}
	if got := count(); got != 1 {
		t.Fatalf("the same reason twice logged %d times, want 1", got)
	}
	if err := p.MarkUnhealthy(gpu, "XID 79"); err != nil {
		t.Fatal(err)
	}
	if got := count(); got != 2 {
		t.Fatalf("a new reason logged %d lines in all, want 2", got)
	}
	if err := p.MarkHealthy(gpu); err != nil {
		t.Fatal(err)
	}
	if err := p.MarkUnhealthy(gpu, "XID 79"); err != nil {
		t.Fatal(err)
	}
	if got := count(); got != 3 {
		t.Fatalf("unhealthy again after healthy logged %d lines in all, want 3", got)
	}
}

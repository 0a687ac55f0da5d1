package devicemanager

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/internal/state"
)

func TestGetContainerDevices(t *testing.T) {
	m, _ := New(Config{PluginDir: "/x"})
	m.st.Commit("p", "c", gpu, nil, checkpoint.DevicesPerNUMA{0: {"a", "b"}, 1: {"a"}, state.NoTopology: {"z"}}, &pluginapi.ContainerAllocateResponse{})
	got := m.GetDevices("p", "c")
	want := DeviceNUMA{gpu: {"a": {0, 1}, "b": {0}, "z": {}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("devices (-want +got):\n%s", diff)
	}
}

func TestDeviceRunContainerOptionsMerge(t *testing.T) {
	m, _ := New(Config{PluginDir: "/x"})
	if opts := m.runOptionsLocked("p", "c"); opts != nil {
		t.Fatalf("options for a container without devices: %+v", opts)
	}
	m.st.Commit("p", "c", "example.com/a", nil, checkpoint.DevicesPerNUMA{}, &pluginapi.ContainerAllocateResponse{})
	if opts := m.runOptionsLocked("p", "c"); opts == nil || opts.Envs != nil || opts.CDIDevices != nil {
		t.Fatalf("empty response: %+v, want empty options", opts)
	}
	m.st.Commit("p", "c", "example.com/a", nil, checkpoint.DevicesPerNUMA{}, &pluginapi.ContainerAllocateResponse{
		Envs:        map[string]string{"X": "1", "Y": "a"},
		Devices:     []*pluginapi.DeviceSpec{{HostPath: "/dev/a", ContainerPath: "/dev/x", Permissions: "rw"}},
		Mounts:      []*pluginapi.Mount{{HostPath: "/h", ContainerPath: "/c", ReadOnly: true}},
		Annotations: map[string]string{"k": "v"},
		CdiDevices:  []*pluginapi.CDIDevice{{Name: "vendor.com/a=1"}, {Name: "vendor.com/a=2"}, {Name: "vendor.com/a=1"}},
	})
	m.st.Commit("p", "c", "example.com/b", nil, checkpoint.DevicesPerNUMA{}, &pluginapi.ContainerAllocateResponse{
		Envs:        map[string]string{"X": "2", "Z": "b"},
		Devices:     []*pluginapi.DeviceSpec{{HostPath: "/dev/b", ContainerPath: "/dev/x"}},
		Mounts:      []*pluginapi.Mount{{HostPath: "/h2", ContainerPath: "/c"}},
		Annotations: map[string]string{"k": "w"},
		CdiDevices:  []*pluginapi.CDIDevice{{Name: "vendor.com/a=2"}, {Name: "vendor.com/b=1"}},
	})
	got := m.runOptionsLocked("p", "c")
	want := &RunContainerOptions{
		Envs:        []EnvVar{{"X", "1"}, {"Y", "a"}, {"Z", "b"}},
		Devices:     []DeviceInfo{{PathOnHost: "/dev/a", PathInContainer: "/dev/x", Permissions: "rw"}},
		Mounts:      []Mount{{Name: "/c", ContainerPath: "/c", HostPath: "/h", ReadOnly: true}},
		Annotations: []Annotation{{"k", "v"}},
		CDIDevices:  []CDIDevice{{"vendor.com/a=1"}, {"vendor.com/a=2"}, {"vendor.com/b=1"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("merged options (-want +got):\n%s", diff)
	}
}

// TestPodsHoldingDevice: the pods to notify for a resource's devices are found within that
// resource only (the kubelet matches IDs across resources).
func TestPodsHoldingDevice(t *testing.T) {
	p := state.New(state.Options{})
	p.Commit("p1", "c1", gpu, nil, checkpoint.DevicesPerNUMA{0: {"a"}}, &pluginapi.ContainerAllocateResponse{})
	p.Commit("p2", "c2", "example.com/nic", nil, checkpoint.DevicesPerNUMA{0: {"a"}}, &pluginapi.ContainerAllocateResponse{})
	p.Commit("p3", "c3", gpu, nil, checkpoint.DevicesPerNUMA{-1: {"b"}}, &pluginapi.ContainerAllocateResponse{})
	if got := p.PodsHolding(gpu, []string{"a", "b", "unknown"}); !cmp.Equal(got, []string{"p1", "p3"}) {
		t.Errorf("pods holding gpu a, b: %v, want [p1 p3]", got)
	}
	if got := p.PodsHolding("example.com/nic", []string{"a"}); !cmp.Equal(got, []string{"p2"}) {
		t.Errorf("pods holding nic a: %v, want [p2]", got)
	}
	if got := p.PodsHolding(gpu, []string{"unknown"}); got != nil {
		t.Errorf("pods holding an unknown device: %v", got)
	}
}

// TestCheckpointRoundTrip: assignments (with the -1 NUMA key and CDI devices) written by one
// manager are restored by the next, allocated devices included.
func TestCheckpointRoundTrip(t *testing.T) {
	dir := shortDir(t)
	a := testManager(t, dir, Config{}, Sources{})
	seed(a, gpu, devices(pluginapi.Healthy, "g1", "g2", "g3")...)
	resp := &pluginapi.ContainerAllocateResponse{
		Envs:       map[string]string{"A": "1"},
		Mounts:     []*pluginapi.Mount{{HostPath: "/h", ContainerPath: "/c"}},
		CdiDevices: []*pluginapi.CDIDevice{{Name: "example.com/gpu=g1"}},
	}
	a.mu.Lock()
	a.st.Commit("p1", "c1", gpu, nil, checkpoint.DevicesPerNUMA{state.NoTopology: {"g1"}, 0: {"g2"}}, resp)
	a.st.Commit("p2", "c2", gpu, nil, checkpoint.DevicesPerNUMA{1: {"g3"}}, &pluginapi.ContainerAllocateResponse{})
	a.mu.Unlock()
	if err := a.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	b := testManager(t, dir, Config{}, Sources{})
	b.mu.Lock()
	defer b.mu.Unlock()
	if diff := cmp.Diff(a.st.Prepared().Data().PodDeviceEntries, b.st.Prepared().Data().PodDeviceEntries); diff != "" {
		t.Fatalf("restored entries (-want +got):\n%s", diff)
	}
	if got := b.runOptionsLocked("p1", "c1"); len(got.Envs) != 1 || len(got.Mounts) != 1 || len(got.CDIDevices) != 1 {
		t.Fatalf("restored run options %+v", got)
	}
	if n := b.st.AllocatedCount(gpu); n != 3 {
		t.Fatalf("restored allocated devices %d, want 3", n)
	}
}

// TestDevicesToAllocateConflictWithUpdateAllocatedDevices: garbage collection while the
// GetPreferredAllocation RPC runs without the lock neither panics nor releases the
// reservation.
func TestDevicesToAllocateConflictWithUpdateAllocatedDevices(t *testing.T) {
	f := newAllocFixture(t, Config{})
	gcDone := make(chan struct{})
	f.plugin(gpu, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, devices(pluginapi.Healthy, "a", "b"),
		func(c *deviceplugin.Config) {
			c.GetPreferredAllocation = func(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
				f.pods.remove("gone")
				f.m.UpdateAllocatedDevices() // runs while the manager waits for this RPC
				close(gcDone)
				return &pluginapi.PreferredAllocationResponse{}, nil
			}
		})
	hold(f.m, "gone", "c", gpu, "b")
	f.pods.add(testPod("gone"))
	pod := testPod("p", container("c", map[string]int64{gpu: 1}))
	if err := f.admit(pod); err != nil {
		t.Fatalf("allocation with a concurrent GC: %v", err)
	}
	<-gcDone
	if got := f.held(pod, "c", gpu); got.Len() != 1 {
		t.Fatalf("held %v", got)
	}
}

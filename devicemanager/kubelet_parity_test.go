package devicemanager

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin/plugintest"
	"github.com/kdm-project/kdm/endpoint"
)

// These tests hold the kubelet v1.36.0's exact strings, gRPC codes and topology hints where
// kdm claims to behave as the kubelet (issue 13, items 1-4).

// TestPluginRPCErrorsAreTheKubelets: a plugin's failing Allocate, GetPreferredAllocation or
// PreStartContainer reaches the caller in the kubelet's words, with gRPC's error as the kubelet
// prints it and nothing of kdm's in between.
func TestPluginRPCErrorsAreTheKubelets(t *testing.T) {
	boom := errors.New("boom")
	const grpcBoom = "rpc error: code = Unknown desc = boom"
	f := newAllocFixture(t, Config{})
	p := f.plugin(gpu, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true, PreStartRequired: true},
		devices(pluginapi.Healthy, "g1", "g2"))

	p.SetFaults(plugintest.Faults{AllocateErr: boom})
	if err := f.admit(testPod("alloc", container("c", map[string]int64{gpu: 1}))); err == nil || err.Error() != grpcBoom {
		t.Errorf("failing Allocate: %v, want the kubelet's %q", err, grpcBoom)
	}

	p.SetFaults(plugintest.Faults{PreferredErr: boom})
	want := "device plugin GetPreferredAllocation rpc failed with err: " + grpcBoom
	if err := f.admit(testPod("pref", container("c", map[string]int64{gpu: 1}))); err == nil || err.Error() != want {
		t.Errorf("failing GetPreferredAllocation: %v, want the kubelet's %q", err, want)
	}

	p.SetFaults(plugintest.Faults{PreStartErr: boom})
	pod := testPod("prestart", container("c", map[string]int64{gpu: 1}))
	if err := f.admit(pod); err != nil {
		t.Fatalf("admit: %v", err)
	}
	want = "device plugin PreStartContainer rpc failed with err: " + grpcBoom
	if _, err := f.m.GetDeviceRunContainerOptions(context.Background(), pod, &pod.Spec.Containers[0]); err == nil || err.Error() != want {
		t.Errorf("failing PreStartContainer: %v, want the kubelet's %q", err, want)
	}
}

// TestRegisterCodeIsTheKubelets: the kubelet's Register returns plain errors, so gRPC sends
// code Unknown with the error's text; an inner status (a plugin without
// GetDevicePluginOptions answers Unimplemented, a dial times out) must not leak its code.
func TestRegisterCodeIsTheKubelets(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{Endpoint: endpoint.Config{DialTimeout: 500 * time.Millisecond}}, Sources{})

	// A device-plugin server that implements none of the service's methods.
	lis, err := net.Listen("unix", filepath.Join(dir, "bare.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, pluginapi.UnimplementedDevicePluginServer{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})

	client := registrationClient(t, m.SocketPath())
	err = register(client, gpu, "bare.sock")
	want := "rpc error: code = Unknown desc = failed to get device plugin options: " +
		"rpc error: code = Unimplemented desc = method GetDevicePluginOptions not implemented"
	if status.Code(err) != codes.Unknown || err.Error() != want {
		t.Errorf("Register with GetDevicePluginOptions unimplemented: %v (code %v), want the kubelet's %q", err, status.Code(err), want)
	}

	// Nobody listens: the dial fails; the kubelet's code is Unknown (the text is the dial's).
	err = register(client, gpu, "absent.sock")
	if status.Code(err) != codes.Unknown || status.Convert(err).Message() == "" {
		t.Errorf("Register with nobody listening: %v (code %v), want code Unknown", err, status.Code(err))
	}
}

// TestHintsReusableDeviceWithoutTopology is the example: 2 NUMA nodes, g0 on node 0,
// g1 on node 1, g2 without topology; the init container takes all three; the app container
// asks 3 of them back from the reuse pool. The kubelet does not count a reusable device without
// topology towards any mask, so no mask holds 3 and the app gets no hint at all.
func TestHintsReusableDeviceWithoutTopology(t *testing.T) {
	f := newAllocFixture(t, Config{NUMANodes: []int{0, 1}})
	f.plugin(gpu, &pluginapi.DevicePluginOptions{}, []*pluginapi.Device{numaDevice("g0", 0), numaDevice("g1", 1), numaDevice("g2")})
	initC := container("init", map[string]int64{gpu: 3})
	app := container("app", map[string]int64{gpu: 3})
	pod := testPod("p", app)
	pod.Spec.InitContainers = []v1.Container{initC}
	f.pods.add(pod)

	// The kubelet's hints for the init container: g2 touches no mask, so none holds 3.
	if diff := cmp.Diff(map[string][]TopologyHint{gpu: {}}, f.m.GetTopologyHints(pod, &pod.Spec.InitContainers[0])); diff != "" {
		t.Errorf("init container hints (-kubelet +kdm):\n%s", diff)
	}
	if err := f.m.Allocate(context.Background(), pod, &pod.Spec.InitContainers[0]); err != nil {
		t.Fatalf("Allocate init: %v", err)
	}
	if diff := cmp.Diff(map[string][]TopologyHint{gpu: {}}, f.m.GetTopologyHints(pod, &pod.Spec.Containers[0])); diff != "" {
		t.Errorf("app container hints (-kubelet +kdm):\n%s", diff)
	}
}

// TestHintsWithoutMachineNUMANodes: with no machine NUMA nodes configured, every node a device
// reports is unknown to the machine and dropped, and the kubelet's enumeration over no nodes
// yields an empty hint list; a resource without topology still gets nil ("no preference").
func TestHintsWithoutMachineNUMANodes(t *testing.T) {
	m, _ := New(Config{PluginDir: "/x"})
	seed(m, gpu, numaDevice("a", 0), numaDevice("b", 1))
	seed(m, "example.com/plain", numaDevice("c"))
	m.sources = Sources{SourcesReady: func() bool { return false }}
	c := container("c", map[string]int64{gpu: 1, "example.com/plain": 1})
	pod := testPod("p", c)
	want := map[string][]TopologyHint{gpu: {}, "example.com/plain": nil}
	if diff := cmp.Diff(want, m.GetTopologyHints(pod, &c)); diff != "" {
		t.Errorf("container hints (-kubelet +kdm):\n%s", diff)
	}
	if diff := cmp.Diff(want, m.GetPodTopologyHints(pod)); diff != "" {
		t.Errorf("pod hints (-kubelet +kdm):\n%s", diff)
	}
}

// TestHintOrderIsTheKubelets: the kubelet lists the masks by size, then in lexicographic order
// of their nodes ({0} {1} {2} {0,1} {0,2} {1,2} {0,1,2}); consumers that take the first of
// equally good hints see the same choice.
func TestHintOrderIsTheKubelets(t *testing.T) {
	m, _ := New(Config{PluginDir: "/x", NUMANodes: []int{0, 1, 2, 3}})
	seed(m, gpu, numaDevice("a", 0), numaDevice("b", 1), numaDevice("c", 2), numaDevice("d", 3))
	m.sources = Sources{SourcesReady: func() bool { return false }}
	c := container("c", map[string]int64{gpu: 2})
	want := []TopologyHint{
		hint(true, 0, 1), hint(true, 0, 2), hint(true, 0, 3), hint(true, 1, 2), hint(true, 1, 3), hint(true, 2, 3),
		hint(false, 0, 1, 2), hint(false, 0, 1, 3), hint(false, 0, 2, 3), hint(false, 1, 2, 3),
		hint(false, 0, 1, 2, 3),
	}
	if diff := cmp.Diff(want, m.GetTopologyHints(testPod("p", c), &c)[gpu]); diff != "" {
		t.Errorf("hints (-kubelet +kdm):\n%s", diff)
	}
}

// TestReusePoolDroppedWithInactivePod holds a fixed kubelet defect (issue 13, item 4). A pod
// whose init container got g0 is rejected (its app container asks more devices than exist)
// and garbage-collected; g0 then turns unhealthy; the pod comes back under the same
// UID. The kubelet keeps the pod's reuse pool {g0} until the next Allocate, so it would hint
// node 0 (the broken device's node) and hand g0 to the init container again, skipping the
// health check that fresh devices get. kdm drops the pool with the pod: the hints and the
// allocation see only healthy g1 on node 1.
func TestReusePoolDroppedWithInactivePod(t *testing.T) {
	f := newAllocFixture(t, Config{NUMANodes: []int{0, 1}})
	p := f.plugin(gpu, &pluginapi.DevicePluginOptions{}, []*pluginapi.Device{numaDevice("g0", 0), numaDevice("g1", 1)})
	newPod := func() *v1.Pod {
		pod := testPod("p", container("app", map[string]int64{gpu: 3}))
		pod.Spec.InitContainers = []v1.Container{container("init", map[string]int64{gpu: 1})}
		return pod
	}
	pod := newPod()
	if err := f.admit(pod); err == nil {
		t.Fatal("a pod asking 3 of 2 devices was admitted")
	}
	if got := f.held(pod, "init", gpu); !got.Equal(sets.New("g0")) {
		t.Fatalf("init container holds %v, want [g0]", sets.List(got))
	}
	f.pods.remove("p")
	f.m.UpdateAllocatedDevices()
	if err := p.SetHealth("g0", pluginapi.Unhealthy); err != nil {
		t.Fatal(err)
	}
	waitFor(t, f.m, "g0 unhealthy", func() bool { return capacityIs(f.m, gpu, 2, 1) })

	again := newPod()
	f.pods.add(again)
	want := []TopologyHint{hint(true, 1), hint(false, 0, 1)}
	if diff := cmp.Diff(want, f.m.GetTopologyHints(again, &again.Spec.InitContainers[0])[gpu]); diff != "" {
		t.Errorf("re-admitted pod's init hints, stale pool kept? (-want +got):\n%s", diff)
	}
	if err := f.m.Allocate(context.Background(), again, &again.Spec.InitContainers[0]); err != nil {
		t.Fatalf("Allocate init again: %v", err)
	}
	if got := f.held(again, "init", gpu); !got.Equal(sets.New("g1")) {
		t.Errorf("re-admitted init container holds %v, want the healthy [g1]", sets.List(got))
	}
}

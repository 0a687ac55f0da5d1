package devicemanager

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestResourcesSnapshot follows Resources through a plugin's life: devices with health, NUMA
// node and holder; the disconnect with the grace period counting down on the manager's clock;
// and, after removal, a resource known only from the device a container still holds.
func TestResourcesSnapshot(t *testing.T) {
	dir := shortDir(t)
	clk := clocktesting.NewFakeClock(time.Now())
	pod := testPod("p1", container("main", map[string]int64{gpu: 1}))
	m := testManager(t, dir, Config{Clock: clk, GracePeriod: time.Minute},
		Sources{ActivePods: func() []*v1.Pod { return []*v1.Pod{pod} }})
	bad := numaDevice("d2", 1)
	bad.Health = pluginapi.Unhealthy
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, []*pluginapi.Device{numaDevice("d1", 0), bad})
	waitFor(t, m, "the device list", func() bool { return capacityIs(m, gpu, 2, 1) })
	if err := m.Allocate(context.Background(), pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatalf("Allocate: %v", err)
	}

	views := m.Resources()
	if len(views) != 1 || views[0].Name != gpu {
		t.Fatalf("Resources() = %+v, want one view of %s", views, gpu)
	}
	ep := views[0].Endpoint
	if ep.State != EndpointRunning || !ep.Listed || ep.Instance == "" || ep.Socket == "" || !ep.StoppedAt.IsZero() {
		t.Errorf("running endpoint = %+v", ep)
	}
	holder := []ContainerKey{{PodUID: "p1", ContainerName: "main"}}
	want := []DeviceView{
		{ID: "d1", Health: DeviceHealthy, NUMANodes: []int64{0}, Holders: holder},
		{ID: "d2", Health: DeviceUnhealthy, NUMANodes: []int64{1}},
	}
	if diff := cmp.Diff(want, views[0].Devices); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}

	p.Stop()
	waitFor(t, m, "the disconnect", func() bool { return capacityIs(m, gpu, 2, 0) })
	clk.Step(20 * time.Second)
	ep = m.Resources()[0].Endpoint
	if ep.State != EndpointStopped || ep.GraceRemaining != 40*time.Second || !ep.StoppedAt.Equal(clk.Now().Add(-20*time.Second)) {
		t.Errorf("stopped endpoint = %+v, want Stopped with 40s of grace left", ep)
	}
	clk.Step(time.Minute)
	if got := m.Resources()[0].Endpoint; got.State != EndpointStopped || got.GraceRemaining != 0 {
		t.Errorf("expired endpoint before GetCapacity = %+v, want Stopped with no grace left (Resources removes nothing)", got)
	}
	if _, _, removed := m.GetCapacity(); len(removed) != 1 {
		t.Fatalf("GetCapacity removed %v, want %s", removed, gpu)
	}
	views = m.Resources()
	want = []DeviceView{{ID: "d1", Health: DeviceUnknown, NUMANodes: []int64{0}, Holders: holder}}
	if len(views) != 1 || views[0].Endpoint.State != EndpointNone {
		t.Fatalf("after removal Resources() = %+v, want the held device's resource with no endpoint", views)
	}
	if diff := cmp.Diff(want, views[0].Devices); diff != "" {
		t.Errorf("devices after removal (-want +got):\n%s", diff)
	}
}

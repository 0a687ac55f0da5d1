package devicemanager

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// startedNoPlugins returns a started manager whose gpu resource is seeded with a placeholder
// endpoint, so updateDevices can be driven directly.
func startedWithSeed(t *testing.T, devs ...*pluginapi.Device) *Manager {
	t.Helper()
	m := testManager(t, shortDir(t), Config{}, Sources{})
	seed(m, gpu, devs...)
	return m
}

func (m *Manager) currentEndpointFor(res string) *endpointInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	info := m.endpoints[res]
	return &info
}

func TestUpdateAllocatedResourcesStatus(t *testing.T) {
	m := startedWithSeed(t, devices(pluginapi.Healthy, "g1", "g2")...)
	hold(m, "p", "app", gpu, "g1", "g2")
	ep := m.currentEndpointFor(gpu).ep
	m.updateDevices(gpu, ep, append(devices(pluginapi.Healthy, "g1"), devices(pluginapi.Unhealthy, "g2")...))

	pod := testPod("p", container("app", map[string]int64{gpu: 2}))
	status := &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "app",
		AllocatedResourcesStatus: []v1.ResourceStatus{{Name: v1.ResourceName(gpu)}, {Name: "other"}}}}}
	m.UpdateAllocatedResourcesStatus(pod, status)
	want := []v1.ResourceStatus{
		{Name: v1.ResourceName(gpu), Resources: []v1.ResourceHealth{
			{ResourceID: "g1", Health: v1.ResourceHealthStatusHealthy},
			{ResourceID: "g2", Health: v1.ResourceHealthStatusUnhealthy}}},
		{Name: "other"},
	}
	if diff := cmp.Diff(want, status.ContainerStatuses[0].AllocatedResourcesStatus); diff != "" {
		t.Fatalf("allocated resources status (-want +got):\n%s", diff)
	}
}

// TestHealthUpdates: unchanged health sends nothing; each new or changed device owned by a pod
// sends that pod once; only 100 updates are buffered, the rest dropped without blocking.
func TestHealthUpdates(t *testing.T) {
	m := startedWithSeed(t)
	ep := m.currentEndpointFor(gpu).ep
	const n = 200
	var list []*pluginapi.Device
	for i := 0; i < n; i++ {
		hold(m, fmt.Sprintf("pod%03d", i), "c", gpu, fmt.Sprintf("d%03d", i))
	}
	m.updateDevices(gpu, ep, nil)
	for i := 0; i < n; i++ {
		list = append(list, &pluginapi.Device{ID: fmt.Sprintf("d%03d", i), Health: pluginapi.Healthy})
		m.updateDevices(gpu, ep, list) // each call brings exactly one new device
	}
	m.updateDevices(gpu, ep, list) // unchanged: no update
	if got := len(m.Updates()); got != updateChannelSize {
		t.Fatalf("%d updates buffered, want %d", got, updateChannelSize)
	}
	for i := 0; i < updateChannelSize; i++ {
		u := <-m.Updates()
		if want := []string{fmt.Sprintf("pod%03d", i)}; !cmp.Equal(u.PodUIDs, want) {
			t.Fatalf("update %d = %v, want %v", i, u.PodUIDs, want)
		}
	}
	list[5] = &pluginapi.Device{ID: "d005", Health: pluginapi.Unhealthy}
	m.updateDevices(gpu, ep, list)
	if u := <-m.Updates(); !cmp.Equal(u.PodUIDs, []string{"pod005"}) {
		t.Fatalf("health change update %v, want [pod005]", u.PodUIDs)
	}
	m.updateDevices(gpu, ep, list)
	if len(m.Updates()) != 0 {
		t.Fatalf("an unchanged list produced an update")
	}
}

// TestStaleInstanceListIgnored: a list from an endpoint that is not the current one changes
// nothing.
func TestStaleInstanceListIgnored(t *testing.T) {
	m := startedWithSeed(t, devices(pluginapi.Healthy, "g1")...)
	stale := m.currentEndpointFor(gpu).ep
	seed(m, gpu, devices(pluginapi.Healthy, "g1", "g2")...) // a newer instance
	m.updateDevices(gpu, stale, nil)
	if !capacityIs(m, gpu, 2, 2) {
		t.Fatalf("a replaced instance's list was applied")
	}
}

// TestDuplicateIDsInList: a list that repeats one ID and so drops another is not mistaken for
// the same devices: the dropped device leaves the resource.
func TestDuplicateIDsInList(t *testing.T) {
	m := startedWithSeed(t, devices(pluginapi.Healthy, "a", "b", "c")...)
	ep := m.currentEndpointFor(gpu).ep
	m.updateDevices(gpu, ep, devices(pluginapi.Healthy, "a", "b", "c"))
	m.updateDevices(gpu, ep, devices(pluginapi.Healthy, "a", "a", "c"))
	if !capacityIs(m, gpu, 2, 2) {
		c, a, _ := m.GetCapacity()
		t.Fatalf("after a list repeating a and dropping b: %v/%v, want 2/2", c, a)
	}
	if _, ok := m.GetAllocatableDevices()[gpu]["b"]; ok {
		t.Fatalf("dropped device b is still allocatable")
	}
}

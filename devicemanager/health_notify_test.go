package devicemanager

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestDisconnectNotifiesHolders: when the plugin goes away its devices turn unhealthy, and the
// pods holding them are named on Updates with their status saying Unhealthy, as a list that
// turned them unhealthy would; when the plugin is back with the same devices, the pods are
// named again and their status says Healthy. A pod holding none of the resource's devices is
// not named.
func TestDisconnectNotifiesHolders(t *testing.T) {
	for _, policy := range []struct {
		name string
		p    Policy
	}{{"kubelet-1.36", KubeletPolicy()}, {"kdm", KDMPolicy()}} {
		t.Run(policy.name, func(t *testing.T) {
			dir := shortDir(t)
			pods := newPodList()
			m := testManager(t, dir, Config{Policy: policy.p}, Sources{ActivePods: pods.active})
			devs := devices(pluginapi.Healthy, "g1", "g2", "g3", "g4")
			p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devs, envAllocator("GPU"))
			waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, 4, 4) })
			allocateOne(t, m, pods, "a", 1)
			allocateOne(t, m, pods, "b", 2)
			pods.add(testPod("idle", container("c", nil)))
			drain(m.Updates())

			p.Stop()
			waitFor(t, m, "the plugin gone", func() bool { return capacityIs(m, gpu, 4, 0) })
			expectUpdate(t, m, "after the plugin went away", []string{"a", "b"})
			for _, uid := range []string{"a", "b"} {
				if got := podHealth(m, uid); !allAre(got, v1.ResourceHealthStatusUnhealthy) {
					t.Fatalf("%s's device health after the plugin went away: %v, want all Unhealthy", uid, got)
				}
			}

			testPlugin(t, dir, gpu, "gpu2.sock", &pluginapi.DevicePluginOptions{}, devs, envAllocator("GPU"))
			waitFor(t, m, "the plugin back", func() bool { return capacityIs(m, gpu, 4, 4) })
			expectUpdate(t, m, "after the plugin came back", []string{"a", "b"})
			for _, uid := range []string{"a", "b"} {
				if got := podHealth(m, uid); !allAre(got, v1.ResourceHealthStatusHealthy) {
					t.Fatalf("%s's device health after the plugin came back: %v, want all Healthy", uid, got)
				}
			}
		})
	}
}

// TestStopDoesNotNotify: the streams that end because the manager stops are no plugin going
// away: no pod is named.
func TestStopDoesNotNotify(t *testing.T) {
	dir := shortDir(t)
	pods := newPodList()
	m := testManager(t, dir, Config{}, Sources{ActivePods: pods.active})
	testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1"), envAllocator("GPU"))
	waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, 1, 1) })
	allocateOne(t, m, pods, "a", 1)
	drain(m.Updates())
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := drain(m.Updates()); len(got) != 0 {
		t.Fatalf("Stop named pods on Updates: %v", got)
	}
}

// expectUpdate waits for the next update, which must name exactly uids.
func expectUpdate(t *testing.T, m *Manager, what string, uids []string) {
	t.Helper()
	select {
	case u := <-m.Updates():
		if !slices.Equal(u.PodUIDs, uids) {
			t.Fatalf("update %s names %v, want %v", what, u.PodUIDs, uids)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("no update %s", what)
	}
}

// podHealth returns the health UpdateAllocatedResourcesStatus gives the devices of the pod's
// container "c".
func podHealth(m *Manager, uid string) []v1.ResourceHealthStatus {
	status := &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "c"}}}
	m.UpdateAllocatedResourcesStatus(testPod(uid), status)
	var out []v1.ResourceHealthStatus
	for _, rs := range status.ContainerStatuses[0].AllocatedResourcesStatus {
		for _, r := range rs.Resources {
			out = append(out, r.Health)
		}
	}
	return out
}

func allAre(hs []v1.ResourceHealthStatus, want v1.ResourceHealthStatus) bool {
	return len(hs) > 0 && !slices.ContainsFunc(hs, func(h v1.ResourceHealthStatus) bool { return h != want })
}

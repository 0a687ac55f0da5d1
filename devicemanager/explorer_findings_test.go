package devicemanager

import (
	"context"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestDeferredAdmissionWaitsThroughEmptyFirstList: after a restart, a plugin that registers
// and first sends an empty list (its devices not discovered yet) is still awaited under
// DeferAdmission; the pod gets its checkpointed device once the plugin lists it. Before, the
// empty list counted as "the plugin is back" and the pod was rejected at once.
func TestDeferredAdmissionWaitsThroughEmptyFirstList(t *testing.T) {
	pods := newPodList()
	clk := clocktesting.NewFakeClock(time.Now())
	deferred := make(chan string, 4)
	m, dir := restartedWithCheckpoint(t, Config{Clock: clk, Policy: KDMPolicy(),
		OnAdmissionDeferred: func(_, _, res string) { deferred <- res }}, pods)
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, nil)
	waitFor(t, m, "the plugin's empty list", func() bool {
		for _, r := range m.Resources() {
			if r.Name == gpu && r.Endpoint.State == EndpointRunning && r.Endpoint.Listed {
				return true
			}
		}
		return false
	})
	old := testPod("old", container("c", map[string]int64{gpu: 1}))
	done := make(chan error, 1)
	go func() { done <- m.Allocate(context.Background(), old, &old.Spec.Containers[0]) }()
	select {
	case <-deferred:
	case err := <-done:
		t.Fatalf("admission did not wait through the empty list: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("admission never reported waiting")
	}
	p.SetDevices(devices(pluginapi.Healthy, "g1", "g2"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("admission after the plugin listed its devices: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("admission still waiting after the plugin listed its devices")
	}
	if got := m.GetDevices(string(old.UID), "c")[gpu]; len(got) != 1 || got["g1"] == nil {
		t.Fatalf("old holds %v, want its checkpointed g1", got)
	}
}

// TestAssignedResourceKnownAfterRestart: a resource whose plugin was gone past the grace period
// is removed, and the checkpoint no longer registers it; after a restart its running pod's
// assignment still names it. Under DeferAdmission the pod waits for the plugin (and keeps its
// device); under the kubelet's policy it is refused as unregistered, as the kubelet does.
func TestAssignedResourceKnownAfterRestart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		policy  Policy
		wantErr string
	}{
		{"kubelet", KubeletPolicy(), "cannot allocate unregistered device example.com/gpu"},
		{"kdm", KDMPolicy(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			pods := newPodList()
			clk := clocktesting.NewFakeClock(time.Now())
			a := oldPodThenPluginGone(t, dir, Config{Clock: clk, GracePeriod: time.Minute}, pods)
			old := testPod("old", container("c", map[string]int64{gpu: 1}))
			waitFor(t, a, "disconnect", func() bool { return capacityIs(a, gpu, 2, 0) })
			clk.Step(2 * time.Minute)
			if _, _, removed := a.GetCapacity(); len(removed) != 1 {
				t.Fatalf("removed %v, want the expired resource", removed)
			}
			a.WaitForCheckpointWrites()
			if err := a.Stop(); err != nil {
				t.Fatal(err)
			}

			m := testManager(t, dir, Config{Clock: clk, GracePeriod: time.Minute, Policy: tc.policy}, Sources{ActivePods: pods.active})
			done := make(chan error, 1)
			go func() { done <- m.Allocate(context.Background(), old, &old.Spec.Containers[0]) }()
			if tc.wantErr != "" {
				if err := <-done; err == nil || err.Error() != tc.wantErr {
					t.Fatalf("got %v, want %q", err, tc.wantErr)
				}
				return
			}
			select {
			case err := <-done:
				t.Fatalf("admission did not wait for the plugin: %v", err)
			case <-time.After(300 * time.Millisecond):
			}
			testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("admission once the plugin is back: %v", err)
				}
			case <-time.After(waitTimeout):
				t.Fatal("admission still waiting after the plugin came back")
			}
			if got := m.GetDevices(string(old.UID), "c")[gpu]; len(got) != 1 || got["g1"] == nil {
				t.Fatalf("old holds %v, want its checkpointed g1", got)
			}
		})
	}
}

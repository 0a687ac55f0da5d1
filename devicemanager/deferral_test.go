package devicemanager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/internal/state"
)

// restartedWithCheckpoint runs a manager that allocated a device to pod "old", stops it, and
// starts a second manager on the same directory with cfg. The plugin is stopped, so the
// second manager knows the resource only from the checkpoint.
func restartedWithCheckpoint(t *testing.T, cfg Config, pods *podList) (*Manager, string) {
	t.Helper()
	dir := shortDir(t)
	a := oldPodThenPluginGone(t, dir, Config{Clock: cfg.Clock}, pods)
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	return testManager(t, dir, cfg, Sources{ActivePods: pods.active}), dir
}

// oldPodThenPluginGone runs a manager on dir with cfg whose plugin lists g1 and g2, allocates
// one of them to pod "old" (added to pods), and stops the plugin. It returns the manager, still
// running.
func oldPodThenPluginGone(t *testing.T, dir string, cfg Config, pods *podList) *Manager {
	t.Helper()
	a := testManager(t, dir, cfg, Sources{ActivePods: pods.active})
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
	waitFor(t, a, "devices", func() bool { return capacityIs(a, gpu, 2, 2) })
	old := testPod("old", container("c", map[string]int64{gpu: 1}))
	pods.add(old)
	if err := a.Allocate(context.Background(), old, &old.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	return a
}

// TestNodeRebootKubeletRejects: after a restart the checkpointed resource has no healthy
// device until its plugin is back, and the kubelet rejects the pod at once.
func TestNodeRebootKubeletRejects(t *testing.T) {
	pods := newPodList()
	m, _ := restartedWithCheckpoint(t, Config{Clock: clocktesting.NewFakeClock(time.Now())}, pods)
	old := testPod("old", container("c", map[string]int64{gpu: 1}))
	err := m.Allocate(context.Background(), old, &old.Spec.Containers[0])
	if err == nil || err.Error() != "no healthy devices present; cannot allocate unhealthy devices example.com/gpu" {
		t.Fatalf("kubelet policy: got %v, want the kubelet's no healthy devices error", err)
	}
}

// TestDeferredAdmission: with Policy.DeferAdmission the same admission waits for the plugin
// and succeeds once it is back, reusing the checkpointed device.
func TestDeferredAdmission(t *testing.T) {
	pods := newPodList()
	clk := clocktesting.NewFakeClock(time.Now())
	m, dir := restartedWithCheckpoint(t, Config{Clock: clk, Policy: Policy{DeferAdmission: true, DeferAdmissionTimeout: time.Minute}}, pods)
	old := testPod("old", container("c", map[string]int64{gpu: 1}))
	done := make(chan error, 1)
	go func() { done <- m.Allocate(context.Background(), old, &old.Spec.Containers[0]) }()
	select {
	case err := <-done:
		t.Fatalf("admission did not wait for the plugin: %v", err)
	default:
	}
	testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("deferred admission failed after the plugin came back: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("deferred admission still waiting after the plugin came back")
	}
}

// TestDeferredAdmissionTimeout: without the plugin, the deferral ends after its timeout on the
// manager's clock, with the kubelet's error and the wait explained.
func TestDeferredAdmissionTimeout(t *testing.T) {
	pods := newPodList()
	clk := clocktesting.NewFakeClock(time.Now())
	m, _ := restartedWithCheckpoint(t, Config{Clock: clk, Policy: Policy{DeferAdmission: true, DeferAdmissionTimeout: time.Minute}}, pods)
	old := testPod("old", container("c", map[string]int64{gpu: 1}))
	done := make(chan error, 1)
	go func() { done <- m.Allocate(context.Background(), old, &old.Spec.Containers[0]) }()
	deadline := time.Now().Add(waitTimeout)
	for !clk.HasWaiters() { // the deferral's timer is armed on the fake clock
		if time.Now().After(deadline) {
			t.Fatalf("admission never started waiting")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Step(time.Minute)
	err := <-done
	if err == nil || !errors.Is(err, state.ErrNoHealthyDevices) || !strings.Contains(err.Error(), "waited 1m0s") {
		t.Fatalf("deferral timeout: got %v", err)
	}
}

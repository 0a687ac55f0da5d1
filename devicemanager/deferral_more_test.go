package devicemanager

import (
	"context"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

// stepUntilDone advances the fake clock by step until the admission returns (the timers it
// waits on may be armed after a step), at most tries times.
func stepUntilDone(t *testing.T, clk *clocktesting.FakeClock, step time.Duration, tries int, done <-chan error) error {
	t.Helper()
	for i := 0; i < tries; i++ {
		clk.Step(step)
		select {
		case err := <-done:
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("admission still waiting after %d steps of %v", tries, step)
	return nil
}

// TestDeferredPodRejectedWhenResourceRemoved: a pod waiting for a checkpointed resource whose
// plugin never returns is rejected when the grace period removes the resource, not at the
// (longer) deferral timeout, and the message says why.
func TestDeferredPodRejectedWhenResourceRemoved(t *testing.T) {
	pods := newPodList()
	clk := clocktesting.NewFakeClock(time.Now())
	deferred := make(chan string, 4)
	m, _ := restartedWithCheckpoint(t, Config{Clock: clk, GracePeriod: time.Minute,
		Policy:              Policy{DeferAdmission: true, DeferAdmissionTimeout: 10 * time.Minute},
		OnAdmissionDeferred: func(_, _, res string) { deferred <- res }}, pods)
	p := testPod("new", container("c", map[string]int64{gpu: 1}))
	pods.add(p)
	done := make(chan error, 1)
	go func() { done <- m.Allocate(context.Background(), p, &p.Spec.Containers[0]) }()
	select {
	case res := <-deferred:
		if res != gpu {
			t.Fatalf("deferred for %q, want %q", res, gpu)
		}
	case err := <-done:
		t.Fatalf("admission did not wait: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("admission never reported waiting")
	}
	err := stepUntilDone(t, clk, 61*time.Second, 5, done)
	if err == nil || !strings.HasPrefix(err.Error(), "no healthy devices present; cannot allocate unhealthy devices example.com/gpu") ||
		!strings.Contains(err.Error(), "grace period") {
		t.Fatalf("got %v, want the kubelet's error explained by the grace period", err)
	}
}

// TestUnknownResourceWaitsAtStartup: under DeferAdmission, a container asking for a resource no
// plugin has registered yet waits while the manager is young, and gets devices once the plugin
// registers; the kubelet policy admits it at once without devices.
func TestUnknownResourceWaitsAtStartup(t *testing.T) {
	t.Run("kdm", func(t *testing.T) {
		dir := shortDir(t)
		pods := newPodList()
		deferred := make(chan string, 4)
		m := testManager(t, dir, Config{Policy: KDMPolicy(), OnAdmissionDeferred: func(_, _, res string) { deferred <- res }},
			Sources{ActivePods: pods.active})
		p := testPod("p", container("c", map[string]int64{gpu: 1}))
		pods.add(p)
		done := make(chan error, 1)
		go func() { done <- m.Allocate(context.Background(), p, &p.Spec.Containers[0]) }()
		select {
		case <-deferred:
		case err := <-done:
			t.Fatalf("admission did not wait for the unregistered resource: %v", err)
		case <-time.After(waitTimeout):
			t.Fatal("admission never reported waiting")
		}
		testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("admission still waiting after the plugin registered")
		}
		if got := len(m.GetDevices("p", "c")[gpu]); got != 1 {
			t.Fatalf("pod holds %d devices of %s, want 1", got, gpu)
		}
	})
	t.Run("kdm past the window", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Now())
		pods := newPodList()
		m := testManager(t, shortDir(t), Config{Clock: clk, Policy: KDMPolicy()}, Sources{ActivePods: pods.active})
		clk.Step(KDMPolicy().DeferAdmissionTimeout)
		p := testPod("p", container("c", map[string]int64{gpu: 1}))
		pods.add(p)
		if err := m.Allocate(context.Background(), p, &p.Spec.Containers[0]); err != nil || len(m.GetDevices("p", "c")) != 0 {
			t.Fatalf("past the start-up window: err %v, devices %v; want admitted without devices", err, m.GetDevices("p", "c"))
		}
	})
	t.Run("kubelet-1.36", func(t *testing.T) {
		pods := newPodList()
		m := testManager(t, shortDir(t), Config{}, Sources{ActivePods: pods.active})
		p := testPod("p", container("c", map[string]int64{gpu: 1}))
		pods.add(p)
		if err := m.Allocate(context.Background(), p, &p.Spec.Containers[0]); err != nil || len(m.GetDevices("p", "c")) != 0 {
			t.Fatalf("kubelet policy: err %v, devices %v; want admitted at once without devices", err, m.GetDevices("p", "c"))
		}
	})
}

package devicemanager

import (
	"context"
	"fmt"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestWokenAdmissionsGoInArrivalOrder: five pods wait, one after another, for a plugin that
// has not registered; it comes with three devices. The first three that asked get them, and
// the last two are refused, as one-at-a-time admission would decide, however the woken
// goroutines are scheduled. Repeated, so that a schedule-dependent outcome shows.
func TestWokenAdmissionsGoInArrivalOrder(t *testing.T) {
	for round := 0; round < 5; round++ {
		dir := shortDir(t)
		pods := newPodList()
		m := testManager(t, dir, Config{Policy: KDMPolicy()}, Sources{ActivePods: pods.active})
		done := make([]chan error, 5)
		for i := range done {
			p := testPod(fmt.Sprintf("p%d", i), container("c", map[string]int64{gpu: 1}))
			pods.add(p)
			done[i] = make(chan error, 1)
			go func() { done[i] <- m.Allocate(context.Background(), p, &p.Spec.Containers[0]) }()
			asleep(t, m, i+1)
		}
		testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2", "g3"))
		for i, ch := range done {
			select {
			case err := <-ch:
				if admitted := err == nil; admitted != (i < 3) {
					t.Fatalf("round %d: p%d admitted %v (err %v); want the first three that waited admitted", round, i, admitted, err)
				}
			case <-time.After(waitTimeout):
				t.Fatalf("round %d: p%d still waiting after the plugin registered", round, i)
			}
		}
	}
}

// asleep waits until n admissions sleep waiting for a device plugin. Going to sleep signals
// nothing, so it looks again every millisecond, up to waitTimeout.
func asleep(t *testing.T, m *Manager, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for m.AdmissionsAsleep() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d admissions asleep after %v, want %d", m.AdmissionsAsleep(), waitTimeout, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRejectedPodCollectedBeforeItsSourceDropsIt: a pod whose Allocate failed is rejected by
// its caller, so the next admission's garbage collection frees what its earlier containers
// got, though the pod source has not yet caught up with the rejection: the kubelet's
// one-at-a-time admission has it gone by then. Under every policy.
func TestRejectedPodCollectedBeforeItsSourceDropsIt(t *testing.T) {
	for _, policy := range PolicyNames() {
		t.Run(policy, func(t *testing.T) {
			pol, err := ParsePolicy(policy)
			if err != nil {
				t.Fatal(err)
			}
			dir := shortDir(t)
			pods := newPodList()
			m := testManager(t, dir, Config{Policy: pol}, Sources{ActivePods: pods.active})
			testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1"))
			waitFor(t, m, "plugin", func() bool { return capacityIs(m, gpu, 1, 1) })
			a := testPod("a", container("c1", map[string]int64{gpu: 1}), container("c2", map[string]int64{gpu: 1}))
			b := testPod("b", container("c", map[string]int64{gpu: 1}))
			pods.add(a)
			pods.add(b)
			ctx := context.Background()
			if err := m.Allocate(ctx, a, &a.Spec.Containers[0]); err != nil {
				t.Fatal(err)
			}
			if err := m.Allocate(ctx, a, &a.Spec.Containers[1]); err == nil {
				t.Fatal("a's second container got a device the first holds")
			}
			if err := m.Allocate(ctx, b, &b.Spec.Containers[0]); err != nil {
				t.Fatalf("b refused while the rejected a still held its device: %v", err)
			}
			if got := m.GetDevices("b", "c")[gpu]; len(got) != 1 {
				t.Fatalf("b holds %v", got)
			}
		})
	}
}

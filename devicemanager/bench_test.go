package devicemanager

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// BenchmarkListAndWatchUpdate measures one device-list update end to end: the plugin sends a
// list over its ListAndWatch stream, the manager applies it and GetCapacity reflects the
// change. Under the kdm policy the checkpoint write is queued to the coalescing writer; under
// the kubelet policy it is written durably before the update counts as done.
func BenchmarkListAndWatchUpdate(b *testing.B) {
	for _, tc := range []struct {
		name   string
		n      int
		policy Policy
	}{{"devices=10", 10, KDMPolicy()}, {"devices=1000", 1000, KDMPolicy()}, {"devices=1000/policy=kubelet", 1000, KubeletPolicy()}} {
		n := tc.n
		b.Run(tc.name, func(b *testing.B) {
			dir := shortDir(b)
			m := testManager(b, dir, Config{Logger: logr.Discard(), Policy: tc.policy}, Sources{})
			devs := devices(pluginapi.Healthy, ids("dev-", n)...)
			p := testPlugin(b, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devs)
			waitFor(b, m, "devices", func() bool { return capacityIs(m, gpu, int64(n), int64(n)) })
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				want := int64(n)
				health := pluginapi.Healthy
				if i%2 == 0 {
					health, want = pluginapi.Unhealthy, int64(n-1)
				}
				m.mu.Lock()
				changed := m.deviceChange
				m.mu.Unlock()
				if err := p.SetHealth("dev-0", health); err != nil {
					b.Fatal(err)
				}
				for {
					<-changed // closed only after the checkpoint write
					if capacityIs(m, gpu, int64(n), want) {
						break
					}
					m.mu.Lock()
					changed = m.deviceChange
					m.mu.Unlock()
				}
			}
		})
	}
}

// allocatedNode starts a manager and a plugin with k+1 devices, and admits k pods holding one
// device each.
func allocatedNode(b *testing.B, k int) (*Manager, *podList) {
	b.Helper()
	dir := shortDir(b)
	pods := newPodList()
	m := testManager(b, dir, Config{Logger: logr.Discard()}, Sources{ActivePods: pods.active})
	testPlugin(b, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, ids("dev-", k+1)...), envAllocator("GPU"))
	waitFor(b, m, "devices", func() bool { return capacityIs(m, gpu, int64(k+1), int64(k+1)) })
	for i := 0; i < k; i++ {
		pod := testPod(fmt.Sprintf("pod-%d", i), container("c", map[string]int64{gpu: 1}))
		pods.add(pod)
		if err := m.Allocate(context.Background(), pod, &pod.Spec.Containers[0]); err != nil {
			b.Fatal(err)
		}
	}
	return m, pods
}

// BenchmarkAllocate measures admitting one pod with one container asking for one device, with
// K pods already allocated: the real Allocate RPC and the durable checkpoint write included.
func BenchmarkAllocate(b *testing.B) {
	for _, k := range []int{0, 100, 1000} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			m, pods := allocatedNode(b, k)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				pod := testPod(fmt.Sprintf("bench-%d", i), container("c", map[string]int64{gpu: 1}))
				pods.add(pod)
				if err := m.Allocate(ctx, pod, &pod.Spec.Containers[0]); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				pods.remove(string(pod.UID))
				m.UpdateAllocatedDevices()
				b.StartTimer()
			}
		})
	}
}

// BenchmarkAllocateAfterDeparture is BenchmarkAllocate with the previous op's pod gone from
// the active pods but not yet collected: each op's garbage collection removes it, inside the
// timed Allocate, as on a node where pods come and go. The removal and the new assignment
// reach the disk in one checkpoint write.
func BenchmarkAllocateAfterDeparture(b *testing.B) {
	for _, k := range []int{0, 1000} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			m, pods := allocatedNode(b, k)
			ctx := context.Background()
			i := 0
			for b.Loop() {
				pod := testPod(fmt.Sprintf("bench-%d", i), container("c", map[string]int64{gpu: 1}))
				pods.add(pod)
				if err := m.Allocate(ctx, pod, &pod.Spec.Containers[0]); err != nil {
					b.Fatal(err)
				}
				pods.remove(string(pod.UID))
				i++
			}
		})
	}
}

// BenchmarkLargePlugin measures a plugin with 1,000,000 devices registering: from the plugin's
// start to the manager reporting all of them in capacity (the ListAndWatch message is about
// 22 MiB). It reports the process's peak resident memory (VmHWM) after the last op; the plugin
// runs in the same process, so that figure holds both sides.
func BenchmarkLargePlugin(b *testing.B) {
	const n = 1_000_000
	devs := devices(pluginapi.Healthy, ids("dev-", n)...)
	for b.Loop() {
		b.StopTimer()
		dir := shortDir(b)
		m := testManager(b, dir, Config{Logger: logr.Discard()}, Sources{})
		b.StartTimer()
		p := testPlugin(b, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devs)
		waitFor(b, m, "a million devices", func() bool { return capacityIs(m, gpu, n, n) })
		b.StopTimer()
		p.Stop()
		_ = m.Stop()
		b.StartTimer()
	}
	if hwm, ok := peakRSS(); ok {
		b.ReportMetric(float64(hwm)/(1<<20), "peak-MiB")
	}
}

// peakRSS reads the process's peak resident set size from /proc/self/status.
func peakRSS() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

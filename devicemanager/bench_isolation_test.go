package devicemanager

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/go-logr/logr"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
)

// Resources of the isolation benchmarks: the GPU pods are admitted; the other resource hangs
// or is large.
const (
	hangingResource = "example.com/hanging"
	largeResource   = "example.com/large"
)

// BenchmarkAdmissionBeside measures admitting a pod asking for one GPU (the Allocate RPC and
// the durable checkpoint write included) beside another resource: none (the floor), one
// whose plugin hangs in Allocate while the GPU pods are admitted (no lock the GPU admission
// takes may be held across that RPC), and one with 1,000,000 healthy devices (each GPU
// admission writes the checkpoint, whose registered-device list then holds a million IDs).
// With "+polled", a goroutine calls Resources without pause meanwhile, as a status page
// refreshing as fast as it can would (the agent calls it every second): the views of the
// large resource must not hold the lock admissions take. B/op and allocs/op are the
// process's (the poller's included); heap-MiB is the live heap after the run.
func BenchmarkAdmissionBeside(b *testing.B) {
	for _, policy := range []struct {
		name   string
		policy Policy
	}{{"policy=kubelet", KubeletPolicy()}, {"policy=kdm", KDMPolicy()}} {
		for _, beside := range []string{"none", "hanging-allocate", "devices=1000000", "devices=1000000+polled"} {
			b.Run(policy.name+"/beside="+beside, func(b *testing.B) {
				benchAdmissionBeside(b, policy.policy, beside)
			})
		}
	}
}

func benchAdmissionBeside(b *testing.B, policy Policy, beside string) {
	dir := shortDir(b)
	pods := newPodList()
	m := testManager(b, dir, Config{Logger: logr.Discard(), Policy: policy}, Sources{ActivePods: pods.active})
	testPlugin(b, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, ids("gpu-", 8)...), envAllocator("GPU"))
	waitFor(b, m, "GPUs", func() bool { return capacityIs(m, gpu, 8, 8) })
	ctx := context.Background()
	switch beside {
	case "hanging-allocate":
		p := testPlugin(b, dir, hangingResource, "hanging.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "h0"))
		p.SetFaults(plugintest.Faults{HangAllocate: true})
		waitFor(b, m, "the hanging resource", func() bool { return capacityIs(m, hangingResource, 1, 1) })
		hctx, cancel := context.WithCancel(ctx)
		stuck := testPod("stuck", container("c", map[string]int64{hangingResource: 1}))
		pods.add(stuck)
		done := make(chan error, 1)
		go func() { done <- m.Allocate(hctx, stuck, &stuck.Spec.Containers[0]) }()
		b.Cleanup(func() {
			cancel()
			<-done
		})
		wctx, wcancel := context.WithTimeout(ctx, waitTimeout)
		defer wcancel()
		if err := p.WaitForCalls(wctx, func(c plugintest.Calls) bool { return len(c.Allocate) == 1 }); err != nil {
			b.Fatalf("the hanging plugin never saw Allocate: %v", err)
		}
	case "devices=1000000", "devices=1000000+polled":
		testPlugin(b, dir, largeResource, "large.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, ids("dev-", largePluginDevices)...), func(c *deviceplugin.Config) { c.Logger = logr.Discard() })
		waitFor(b, m, "a million devices", func() bool { return capacityIs(m, largeResource, largePluginDevices, largePluginDevices) })
		m.WaitForCheckpointWrites()
		if beside == "devices=1000000+polled" {
			pollResources(b, m)
		}
	}
	// The first admission pays for what is computed once (the large list's text).
	admitGPU := func(i int) {
		pod := testPod(fmt.Sprintf("bench-%d", i), container("c", map[string]int64{gpu: 1}))
		pods.add(pod)
		if err := m.Allocate(ctx, pod, &pod.Spec.Containers[0]); err != nil {
			b.Fatal(err)
		}
		pods.remove(string(pod.UID))
	}
	admitGPU(-1)
	runtime.GC()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		admitGPU(i)
		i++
	}
	b.StopTimer()
	b.ReportMetric(float64(liveHeap())/(1<<20), "heap-MiB")
}

// pollResources calls m.Resources in a loop until the benchmark ends.
func pollResources(b *testing.B, m *Manager) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				m.Resources()
			}
		}
	}()
	b.Cleanup(func() {
		close(stop)
		<-done
	})
}

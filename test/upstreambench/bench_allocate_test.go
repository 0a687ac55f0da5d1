package upstreambench

import (
	"fmt"
	"testing"
)

// BenchmarkAllocate admits one pod whose one container asks for one device, with K pods
// already holding one device each (restored from a kubelet checkpoint) and one device free.
// An op is the manager's Allocate: garbage collection of the pod admitted by the previous op
// (it left the active pods), the plugin's Allocate RPC (with CDI devices in the response)
// and the checkpoint write. K=10000 runs for kdm only.
func BenchmarkAllocate(b *testing.B) {
	for _, k := range []int{0, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("pods=%d", k), func(b *testing.B) {
			for _, side := range sides() {
				if k > 1000 && side.name == "kubelet" {
					continue // the kubelet takes about a second per op here; kdm alone shows its scaling
				}
				b.Run(side.name, func(b *testing.B) { benchAllocate(b, side, k) })
			}
		})
	}
}

func benchAllocate(b *testing.B, side implementation, k int) {
	dir := shortDir(b)
	seedCheckpoint(b, dir, checkpointData(b, k, 1, k+1, false))
	pods := newPodList()
	for i := 0; i < k; i++ {
		pods.add(newPod(i, 1))
	}
	m := side.start(b, dir, pods)
	startPlugin(b, dir, deviceList(k+1))
	waitAllocatable(b, m, int64(k+1))

	next := k
	for b.Loop() {
		pod := newPod(next, 1)
		pods.add(pod)
		if err := m.allocate(pod); err != nil {
			b.Fatalf("allocating pod %d with %d pods allocated: %v", next, k, err)
		}
		pods.remove(pod.UID) // the next op's garbage collection releases its device
		next++
	}
	b.StopTimer()
	if got := len(m.devices(newPod(next-1, 1))); got != 1 {
		b.Fatalf("the last pod holds %d devices, want 1", got)
	}
}

package upstreambench

import (
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	kdm "github.com/kdm-project/kdm/devicemanager"
)

// BenchmarkListAndWatchUpdate measures one device-list update: the plugin sends its 1000
// devices over ListAndWatch with the health of a device that a pod holds flipped, and an op
// ends when the manager's allocatable count shows it. The kubelet and kdm's kubelet policy
// write the checkpoint on the stream before taking the next update, so in a run of ops each
// op pays for one write even where the count changes before the write; kdm's policy
// coalesces that write in the background.
func BenchmarkListAndWatchUpdate(b *testing.B) {
	const n = 1000
	b.Run("devices=1000", func(b *testing.B) {
		for _, side := range []implementation{kubeletSide(), kdmSide("kdm", kdm.KubeletPolicy()), kdmSide("kdm,policy=kdm", kdm.KDMPolicy())} {
			b.Run(side.name, func(b *testing.B) { benchListAndWatch(b, side, n) })
		}
	})
}

func benchListAndWatch(b *testing.B, side implementation, n int) {
	dir := shortDir(b)
	pods := newPodList()
	m := side.start(b, dir, pods)
	p := startPlugin(b, dir, deviceList(n))
	waitAllocatable(b, m, int64(n))
	holder := newPod(0, 1)
	pods.add(holder)
	if err := m.allocate(holder); err != nil {
		b.Fatal(err)
	}
	held := m.devices(holder)
	if len(held) != 1 {
		b.Fatalf("the pod holds %v, want one device", held)
	}
	// Two lists, each with the held device in the other state, built once.
	healthy, flipped := deviceList(n), deviceList(n)
	for _, d := range flipped {
		if d.ID == held[0] {
			d.Health = pluginapi.Unhealthy
		}
	}

	i := 0
	for b.Loop() {
		list, want := flipped, int64(n-1)
		if i%2 == 1 {
			list, want = healthy, int64(n)
		}
		p.s.Update(list)
		waitAllocatable(b, m, want)
		i++
	}
}

package upstreambench

import "testing"

// BenchmarkRestart measures a manager restart with 250 running pods holding all 1000
// devices (4 each): an op builds and starts a new manager on the previous one's directory
// (it reads the checkpoint, removes the plugin sockets and serves a new kubelet.sock), the
// plugin serves its socket again and registers, and the op ends when all 1000 devices are
// allocatable. Stopping the previous manager is not timed.
func BenchmarkRestart(b *testing.B) {
	const pods, perPod = 250, 4
	b.Run("devices=1000,pods=250", func(b *testing.B) {
		for _, side := range sides() {
			b.Run(side.name, func(b *testing.B) {
				dir := shortDir(b)
				seedCheckpoint(b, dir, checkpointData(b, pods, perPod, pods*perPod, false))
				active := newPodList()
				for i := 0; i < pods; i++ {
					active.add(newPod(i, perPod))
				}
				m := side.start(b, dir, active)
				p := startPlugin(b, dir, deviceList(pods*perPod))
				waitAllocatable(b, m, pods*perPod)
				for b.Loop() {
					b.StopTimer()
					m.stop()
					b.StartTimer()
					m = side.start(b, dir, active)
					if err := p.restart(); err != nil {
						b.Fatal(err)
					}
					waitAllocatable(b, m, pods*perPod)
				}
				b.StopTimer()
				if got := len(m.devices(newPod(pods-1, perPod))); got != perPod {
					b.Fatalf("after the restarts the last pod holds %d devices, want %d", got, perPod)
				}
			})
		}
	})
}

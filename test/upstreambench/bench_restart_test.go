package upstreambench

import (
	"testing"
	"time"
)

// BenchmarkRestart measures a manager restart with 250 running pods holding all 1000
// devices (4 each): an op builds and starts a new manager on the previous one's directory
// (it reads the checkpoint, removes the plugin sockets and serves a new kubelet.sock), the
// plugin serves its socket again and registers, and the op ends when all 1000 devices are
// allocatable. Stopping the previous manager is not timed. Beside ns/op it reports the mean
// of each part of an op (restartParts).
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
				// Each op starts a manager: only the last one is left for the cleanup to stop, so
				// that the stopped ones are garbage and the heap does not grow with the ops.
				m := side.launch(b, dir, active)
				b.Cleanup(func() { m.stop() })
				p := startPlugin(b, dir, deviceList(pods*perPod))
				waitAllocatable(b, m, pods*perPod)
				var parts restartParts
				for b.Loop() {
					b.StopTimer()
					m.stop()
					b.StartTimer()
					t0 := time.Now()
					m = side.launch(b, dir, active)
					t1 := time.Now()
					if err := p.restart(); err != nil {
						b.Fatal(err)
					}
					t2 := time.Now()
					waitAllocatable(b, m, pods*perPod)
					parts.add(t0, t1, t2, time.Now())
				}
				b.StopTimer()
				parts.report(b)
				if got := len(m.devices(newPod(pods-1, perPod))); got != perPod {
					b.Fatalf("after the restarts the last pod holds %d devices, want %d", got, perPod)
				}
			})
		}
	})
}

// restartParts adds up the three parts of restart ops: the manager's start (reading the
// checkpoint, serving kubelet.sock), the plugin's restart and registration, and the wait
// until the count shows the plugin's list.
type restartParts struct{ start, plugin, capacity time.Duration }

// add records one op whose parts ended at t1, t2 and t3, from t0.
func (r *restartParts) add(t0, t1, t2, t3 time.Time) {
	r.start += t1.Sub(t0)
	r.plugin += t2.Sub(t1)
	r.capacity += t3.Sub(t2)
}

// report adds each part's mean per op to b's results, in microseconds.
func (r *restartParts) report(b *testing.B) {
	for _, p := range []struct {
		d    time.Duration
		unit string
	}{{r.start, "start-us/op"}, {r.plugin, "plugin-us/op"}, {r.capacity, "capacity-us/op"}} {
		b.ReportMetric(float64(p.d.Microseconds())/float64(b.N), p.unit)
	}
}

package suite

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	kubeletcp "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
)

// Allocate admits one pod whose one container asks for one device, with K pods already
// holding one device each (restored from a checkpoint) and one device free. An op is the
// manager's Allocate: garbage collection of the pod admitted by the previous op (it left the
// active pods), the plugin's Allocate RPC (with CDI devices in the response) and the
// checkpoint write. K=10000 runs for the sides that are not the kubelet only.
func Allocate(b *testing.B, sides []Side) {
	for _, k := range []int{0, 100, 1000, 10000} {
		var run []Side
		for _, side := range sides {
			if k <= 1000 || !side.Kubelet { // the kubelet takes about a second per op above; kdm alone shows its scaling
				run = append(run, side)
			}
		}
		if len(run) == 0 {
			continue // a benchmark without sub-benchmarks would report itself, as an empty op
		}
		b.Run(fmt.Sprintf("pods=%d", k), func(b *testing.B) {
			for _, side := range run {
				b.Run(side.Name, func(b *testing.B) { allocateOps(b, side, k) })
			}
		})
	}
}

func allocateOps(b *testing.B, side Side, k int) {
	dir := ShortDir(b)
	SeedCheckpoint(b, dir, CheckpointData(b, k, 1, k+1, false))
	pods := NewPodList()
	for i := 0; i < k; i++ {
		pods.Add(NewPod(i, 1))
	}
	m := side.Start(b, dir, pods)
	StartPlugin(b, dir, DeviceList(k+1))
	WaitAllocatable(b, m, int64(k+1))

	next := k
	for b.Loop() {
		pod := NewPod(next, 1)
		pods.Add(pod)
		if err := m.Allocate(pod); err != nil {
			b.Fatalf("allocating pod %d with %d pods allocated: %v", next, k, err)
		}
		pods.Remove(pod.UID) // the next op's garbage collection releases its device
		next++
	}
	b.StopTimer()
	if got := len(m.Devices(NewPod(next-1, 1))); got != 1 {
		b.Fatalf("the last pod holds %d devices, want 1", got)
	}
}

// ListAndWatchUpdate measures one device-list update: the plugin sends its 1000 devices over
// ListAndWatch with the health of a device that a pod holds flipped, and an op ends when the
// manager's allocatable count shows it.
func ListAndWatchUpdate(b *testing.B, sides []Side) {
	const n = 1000
	b.Run("devices=1000", func(b *testing.B) {
		for _, side := range sides {
			b.Run(side.Name, func(b *testing.B) { listAndWatchOps(b, side, n) })
		}
	})
}

func listAndWatchOps(b *testing.B, side Side, n int) {
	dir := ShortDir(b)
	pods := NewPodList()
	m := side.Start(b, dir, pods)
	p := StartPlugin(b, dir, DeviceList(n))
	WaitAllocatable(b, m, int64(n))
	holder := NewPod(0, 1)
	pods.Add(holder)
	if err := m.Allocate(holder); err != nil {
		b.Fatal(err)
	}
	held := m.Devices(holder)
	if len(held) != 1 {
		b.Fatalf("the pod holds %v, want one device", held)
	}
	// Two lists, each with the held device in the other state, built once.
	healthy, flipped := DeviceList(n), DeviceList(n)
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
		p.S.Update(list)
		WaitAllocatable(b, m, want)
		i++
	}
}

// Restart measures a manager restart with 250 running pods holding all 1000 devices (4
// each): an op builds and starts a new manager on the previous one's directory (it reads the
// checkpoint, removes the plugin sockets and serves a new kubelet.sock), the plugin serves
// its socket again and registers, and the op ends when all 1000 devices are allocatable.
// Stopping the previous manager is not timed. Beside ns/op it reports the mean of each part
// of an op (restartParts).
func Restart(b *testing.B, sides []Side) {
	const pods, perPod = 250, 4
	b.Run("devices=1000,pods=250", func(b *testing.B) {
		for _, side := range sides {
			b.Run(side.Name, func(b *testing.B) {
				dir := ShortDir(b)
				SeedCheckpoint(b, dir, CheckpointData(b, pods, perPod, pods*perPod, false))
				active := NewPodList()
				for i := 0; i < pods; i++ {
					active.Add(NewPod(i, perPod))
				}
				// Each op starts a manager: only the last one is left for the cleanup to stop, so
				// that the stopped ones are garbage and the heap does not grow with the ops.
				m := side.Launch(b, dir, active)
				b.Cleanup(func() { m.Stop() })
				p := StartPlugin(b, dir, DeviceList(pods*perPod))
				WaitAllocatable(b, m, pods*perPod)
				var parts restartParts
				for b.Loop() {
					b.StopTimer()
					m.Stop()
					b.StartTimer()
					t0 := time.Now()
					m = side.Launch(b, dir, active)
					t1 := time.Now()
					if err := p.Restart(); err != nil {
						b.Fatal(err)
					}
					t2 := time.Now()
					WaitAllocatable(b, m, pods*perPod)
					parts.add(t0, t1, t2, time.Now())
				}
				b.StopTimer()
				parts.report(b)
				if got := len(m.Devices(NewPod(pods-1, perPod))); got != perPod {
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

// CheckConstructor checks that side's manager is the one measured: it serves kubelet.sock in
// the directory given, restores the checkpoint found there and allocates through the plugin
// stub, and it leaves no goroutine behind once stopped. For the kubelet's manager, built
// through go:linkname, this is what catches a declaration that no longer matches.
func CheckConstructor(t *testing.T, side Side) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	t.Run("run", func(t *testing.T) { // its cleanups stop everything before the leak check
		dir := ShortDir(t)
		SeedCheckpoint(t, dir, CheckpointData(t, 2, 1, 3, false))
		pods := NewPodList()
		pods.Add(NewPod(0, 1))
		pods.Add(NewPod(1, 1))
		m := side.Start(t, dir, pods)
		if got := m.Devices(NewPod(1, 1)); len(got) != 1 || got[0] != DeviceID(1) {
			t.Fatalf("restored pod 1 holds %v, want [%s]", got, DeviceID(1))
		}
		StartPlugin(t, dir, DeviceList(3))
		WaitAllocatable(t, m, 3)
		pod := NewPod(2, 1)
		pods.Add(pod)
		if err := m.Allocate(pod); err != nil {
			t.Fatal(err)
		}
		if got := m.Devices(pod); len(got) != 1 || got[0] != DeviceID(2) {
			t.Errorf("the new pod holds %v, want the one free device [%s]", got, DeviceID(2))
		}
	})
}

// CheckpointCase names the checkpoint benchmarks' one size; CheckpointPods and
// CheckpointDevices are it: a node with 1000 pods of 4 devices each, split over two NUMA
// nodes, every response with CDI devices.
const (
	CheckpointCase    = "pods=1000,devices=4"
	CheckpointPods    = 1000
	CheckpointDevices = 4
)

// CheckpointBenchData is the checkpoint the encode and write benchmarks measure.
func CheckpointBenchData(tb testing.TB) *Checkpoint {
	return CheckpointData(tb, CheckpointPods, CheckpointDevices, CheckpointPods*CheckpointDevices, true)
}

// KubeletCheckpointEncode is the kubelet's side of turning the device manager's state into
// the file's bytes: its checkpoint data rebuilt, then MarshalCheckpoint (checksum and JSON).
func KubeletCheckpointEncode(b *testing.B) {
	d := CheckpointBenchData(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Kubelet().MarshalCheckpoint(); err != nil {
			b.Fatal(err)
		}
	}
}

// KubeletCheckpointWrite is the same written to disk by the kubelet's checkpoint manager
// (temporary file, fsync, rename).
func KubeletCheckpointWrite(b *testing.B) {
	d := CheckpointBenchData(b)
	cm, err := checkpointmanager.NewCheckpointManager(ShortDir(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := cm.CreateCheckpoint(CheckpointFile, d.Kubelet()); err != nil {
			b.Fatal(err)
		}
	}
}

// Churn is the checkpoint of a node where pods come and go: CheckpointPods pods of
// CheckpointDevices devices, and per step the oldest pod leaves and a new one arrives on its
// devices, as after one garbage collection and one Allocate. Each side keeps the entries the
// way its manager does between writes (the kubelet rebuilds its checkpoint data from its pod
// devices on every write). The entries of the arriving pods are built before timing.
type Churn struct {
	// Current are the entries of the pods on the node, oldest first.
	Current []Entry
	// Arrivals are the entries of the arriving pods, one per step, cycling.
	Arrivals []Entry
	// Registered is the checkpoint's registered devices.
	Registered map[string][]string
	step       int
}

// NewChurn is the node before its first step.
func NewChurn(tb testing.TB) *Churn {
	d := CheckpointData(tb, 2*CheckpointPods, CheckpointDevices, CheckpointPods*CheckpointDevices, true)
	c := &Churn{Current: d.Entries[:CheckpointPods], Arrivals: d.Entries[CheckpointPods:], Registered: d.Registered}
	// The arriving pods take the devices the leaving ones held.
	for i := range c.Arrivals {
		c.Arrivals[i].DeviceIDs = c.Current[i].DeviceIDs
	}
	return c
}

// kubeletStep replaces the oldest entry with the next arrival and returns the kubelet's
// checkpoint of the result.
func (c *Churn) kubeletStep() kubeletcp.DeviceManagerCheckpoint {
	c.Current = append(c.Current[1:], c.Arrivals[c.step%len(c.Arrivals)])
	c.step++
	return (&Checkpoint{Entries: c.Current, Registered: c.Registered}).Kubelet()
}

// KubeletCheckpointEncodeChurn is the kubelet's MarshalCheckpoint of its rebuilt data after
// one pod left and another arrived (see Churn).
func KubeletCheckpointEncodeChurn(b *testing.B) {
	c := NewChurn(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.kubeletStep().MarshalCheckpoint(); err != nil {
			b.Fatal(err)
		}
	}
}

// KubeletCheckpointWriteChurn is KubeletCheckpointEncodeChurn written to disk, as
// KubeletCheckpointWrite writes.
func KubeletCheckpointWriteChurn(b *testing.B) {
	cm, err := checkpointmanager.NewCheckpointManager(ShortDir(b))
	if err != nil {
		b.Fatal(err)
	}
	c := NewChurn(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := cm.CreateCheckpoint(CheckpointFile, c.kubeletStep()); err != nil {
			b.Fatal(err)
		}
	}
}

package suite

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	kubeletcp "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
)

// Departure orders of Allocate: which pod leaves the node in each op.
const (
	// DepartsNewest: the pod the previous op admitted, whose entry is the checkpoint's last
	// (kdm's best case: it rewrites the file's tail).
	DepartsNewest = "newest"
	// DepartsOldest: the pod admitted first (for the restored pods, the checkpoint's first
	// entry: kdm's worst case, it rewrites the whole file).
	DepartsOldest = "oldest"
	// DepartsRandom: a pod drawn at random, the same sequence on every side.
	DepartsRandom = "random"
)

// KubeletMaxAllocatePods is the largest Allocate size the kubelet's manager runs at: its op
// takes about a second at 10,000 pods (go-spew over every pod, on every write), so that size
// runs for kdm alone.
const KubeletMaxAllocatePods = 1000

// Allocate admits one pod whose one container asks for one device, with K pods already
// holding one device each (restored from a checkpoint) and one device free. An op is the
// manager's Allocate: garbage collection of the pod that left after the previous op (no
// longer active), the plugin's Allocate RPC (with CDI devices in the response) and the
// checkpoint write. Which pod leaves is the sub-benchmark's departure order (Departs*);
// at K=0 the only pod there is to leave is the previous op's, so that size has one order.
func Allocate(b *testing.B, sides []Side) {
	for _, k := range []int{0, 100, 1000, 10000} {
		orders := []string{DepartsNewest, DepartsOldest, DepartsRandom}
		if k == 0 {
			orders = []string{""}
		}
		for _, order := range orders {
			name := fmt.Sprintf("pods=%d", k)
			if order != "" {
				name += ",departs=" + order
			}
			b.Run(name, func(b *testing.B) {
				for _, side := range sides {
					b.Run(side.Name, func(b *testing.B) {
						if side.Kubelet && k > KubeletMaxAllocatePods {
							b.Skip("not run: the kubelet's op takes about a second at this size")
						}
						allocateOps(b, side, k, order)
					})
				}
			})
		}
	}
}

// allocateWarmupPer sets Allocate's warm-up: one untimed op per allocateWarmupPer pods held,
// on every side (see warmUp).
const allocateWarmupPer = 32

func allocateOps(b *testing.B, side Side, k int, order string) {
	dir := ShortDir(b)
	SeedCheckpoint(b, dir, CheckpointData(b, k, 1, k+1, false))
	pods := NewPodList()
	// admitted holds the active pods in the order they were admitted; the restored ones in
	// the checkpoint's order.
	admitted := make([]*v1.Pod, 0, k+1)
	for i := 0; i < k; i++ {
		p := NewPod(i, 1)
		pods.Add(p)
		admitted = append(admitted, p)
	}
	m := side.Start(b, dir, pods)
	before := CheckpointID(b, dir)
	StartPlugin(b, dir, DeviceList(k+1))
	WaitAllocatable(b, m, int64(k+1))
	m.Settle(b, before)
	random := rand.New(rand.NewPCG(uint64(k), 0x5eed))

	next := k
	op := func() {
		pod := NewPod(next, 1)
		pods.Add(pod)
		if err := m.Allocate(pod); err != nil {
			b.Fatalf("allocating pod %d with %d pods allocated: %v", next, k, err)
		}
		admitted = append(admitted, pod)
		// One pod leaves: the next op's garbage collection releases its device.
		i := len(admitted) - 1
		switch order {
		case DepartsOldest:
			i = 0
		case DepartsRandom:
			i = random.IntN(len(admitted))
		}
		pods.Remove(admitted[i].UID)
		admitted = slices.Delete(admitted, i, i+1)
		next++
	}
	report := warmUp(b, k/allocateWarmupPer, op)
	for b.Loop() {
		op()
	}
	b.StopTimer()
	report()
	if got := len(m.Devices(NewPod(next-1, 1))); got != 1 {
		b.Fatalf("the last pod holds %d devices, want 1", got)
	}
}

// warmUp runs n ops untimed before a benchmark's timed ones, the same on every side, so that
// the row times the steady state of a node that has admitted pods for a while rather than the
// first ops after a start: a manager that learns what its unchanged content does to the
// checksum (kdm builds each entry's map of it, and a large device list's, in its first few
// writes after a change) has paid for that by then. The returned function, called after the
// timed ops (b.Loop drops metrics reported before it), reports what the warm-up took as
// warmup-ms beside the row.
func warmUp(b *testing.B, n int, op func()) (report func()) {
	start := time.Now()
	for range n {
		op()
	}
	took := time.Since(start)
	return func() {
		if n > 0 {
			b.ReportMetric(float64(took.Microseconds())/1000, "warmup-ms")
		}
	}
}

// ListAndWatchUpdate measures one device-list update: the plugin sends its 1000 devices over
// ListAndWatch with the health of a device that a pod holds flipped, and an op ends when the
// manager has announced the pod's health update and its allocatable count shows the change
// (WaitUpdated: no spinning, the same wait for every side). largeSides also run it with the
// largest plugin the kubelet accepts (KubeletMaxDevices) and, but for the kubelet, with
// LargeDevices, the plugin then in a process of its own (listAndWatchLargeOps).
func ListAndWatchUpdate(b *testing.B, sides, largeSides []Side) {
	const n = 1000
	b.Run("devices=1000", func(b *testing.B) {
		for _, side := range sides {
			b.Run(side.Name, func(b *testing.B) { listAndWatchOps(b, side, n) })
		}
	})
	for _, n := range largeSizes() {
		b.Run(fmt.Sprintf("devices=%d", n), func(b *testing.B) {
			for _, side := range largeSides {
				b.Run(side.Name, func(b *testing.B) {
					skipOverKubeletLimit(b, side, n)
					listAndWatchLargeOps(b, side, n)
				})
			}
		})
	}
}

func listAndWatchOps(b *testing.B, side Side, n int) {
	dir := ShortDir(b)
	pods := NewPodList()
	m := side.Start(b, dir, pods)
	before := CheckpointID(b, dir)
	p := StartPlugin(b, dir, DeviceList(n))
	WaitAllocatable(b, m, int64(n))
	m.Settle(b, before)
	held := allocateHolder(b, m, pods)
	// Two lists, each with the held device in the other state, built once.
	healthy, flipped := DeviceList(n), DeviceList(n)
	for _, d := range flipped {
		if d.ID == held {
			d.Health = pluginapi.Unhealthy
		}
	}
	ClearUpdated(m)

	i := 0
	for b.Loop() {
		list, want := flipped, int64(n-1)
		if i%2 == 1 {
			list, want = healthy, int64(n)
		}
		p.S.Update(list)
		WaitUpdated(b, m, want)
		i++
	}
}

// allocateHolder admits a pod of one device, whose health the ListAndWatch benchmarks flip,
// and returns the device.
func allocateHolder(tb testing.TB, m Manager, pods *PodList) string {
	tb.Helper()
	holder := NewPod(0, 1)
	pods.Add(holder)
	if err := m.Allocate(holder); err != nil {
		tb.Fatal(err)
	}
	held := m.Devices(holder)
	if len(held) != 1 {
		tb.Fatalf("the pod holds %v, want one device", held)
	}
	return held[0]
}

// Restart measures a manager restart with 250 running pods holding all 1000 devices (4
// each): an op builds and starts a new manager on the previous one's directory (it reads the
// checkpoint, removes the plugin sockets and serves a new kubelet.sock), the plugin serves
// its socket again and registers, and the op ends when the manager has announced the
// restored pods' devices on its Updates channel (both managers announce devices that are new
// to them and held by a pod, right after applying the list, before writing the checkpoint)
// and all 1000 devices are allocatable: WaitUpdated, the same wait as ListAndWatchUpdate's,
// which neither spins nor takes a manager's lock. Between ops, untimed, the previous manager's checkpoint write that follows the plugin's list
// is waited for (Manager.Settle) and the manager is stopped, so that no write of one op lands
// in the next (CheckRestartSettles checks it). Beside ns/op it reports the mean of each part
// of an op (restartParts).
func Restart(b *testing.B, sides []Side) {
	b.Run(RestartCase, func(b *testing.B) {
		for _, side := range sides {
			b.Run(side.Name, func(b *testing.B) {
				r := newRestartRig(b, side)
				var parts restartParts
				for b.Loop() {
					b.StopTimer()
					r.settleAndStop(b)
					b.StartTimer()
					r.op(b, &parts)
				}
				b.StopTimer()
				parts.report(b)
				r.check(b)
			})
		}
	})
}

// RestartCase names Restart's one size; RestartPods and RestartPerPod are it.
const (
	RestartCase   = "devices=1000,pods=250"
	RestartPods   = 250
	RestartPerPod = 4
)

// restartRig is a node whose manager restarts: its directory, pods, plugin and current
// manager.
type restartRig struct {
	side   Side
	dir    string
	active *PodList
	m      Manager
	p      *Plugin
	// launched is the checkpoint's identity when m was launched (set before op).
	launched FileID
}

// newRestartRig seeds the checkpoint, starts the first manager and the plugin, and waits for
// the plugin's devices.
func newRestartRig(tb testing.TB, side Side) *restartRig {
	r := &restartRig{side: side, dir: ShortDir(tb), active: NewPodList()}
	SeedCheckpoint(tb, r.dir, CheckpointData(tb, RestartPods, RestartPerPod, RestartPods*RestartPerPod, false))
	for i := 0; i < RestartPods; i++ {
		r.active.Add(NewPod(i, RestartPerPod))
	}
	// Each op starts a manager: only the last one is left for the cleanup to stop, so that
	// the stopped ones are garbage and the heap does not grow with the ops.
	r.launched = CheckpointID(tb, r.dir)
	r.m = side.Launch(tb, r.dir, r.active)
	tb.Cleanup(func() { r.m.Stop() })
	r.launched = CheckpointID(tb, r.dir)
	r.p = StartPlugin(tb, r.dir, DeviceList(RestartPods*RestartPerPod))
	WaitAllocatable(tb, r.m, RestartPods*RestartPerPod)
	return r
}

// settleAndStop waits for the current manager's post-list write and stops it, and notes the
// checkpoint the next manager starts from.
func (r *restartRig) settleAndStop(tb testing.TB) {
	r.m.Settle(tb, r.launched)
	r.m.Stop()
	r.launched = CheckpointID(tb, r.dir)
}

// op is one restart: a new manager, the plugin's restart and registration, the wait for its
// devices. parts, if not nil, records the time of each part.
func (r *restartRig) op(tb testing.TB, parts *restartParts) {
	t0 := time.Now()
	r.m = r.side.Launch(tb, r.dir, r.active)
	t1 := time.Now()
	if err := r.p.Restart(); err != nil {
		tb.Fatal(err)
	}
	t2 := time.Now()
	WaitUpdated(tb, r.m, RestartPods*RestartPerPod)
	if parts != nil {
		parts.add(t0, t1, t2, time.Now())
	}
}

// check checks that the restored pods still hold their devices.
func (r *restartRig) check(tb testing.TB) {
	if got := len(r.m.Devices(NewPod(RestartPods-1, RestartPerPod))); got != RestartPerPod {
		tb.Fatalf("after the restarts the last pod holds %d devices, want %d", got, RestartPerPod)
	}
}

// CheckRestartSettles checks that Restart's ops do not overlap: after a restart op and the
// untimed Settle, the checkpoint write that follows the plugin's list has replaced the
// checkpoint, and nothing changes the checkpoint from then until the next op starts (a
// write still in flight when the manager is stopped would land inside the next timed op).
func CheckRestartSettles(t *testing.T, side Side) {
	r := newRestartRig(t, side)
	for op := 0; op < 3; op++ {
		if op > 0 {
			r.op(t, nil)
		}
		r.m.Settle(t, r.launched)
		settled := CheckpointID(t, r.dir)
		if settled == r.launched {
			t.Errorf("op %d: the checkpoint was not written after the plugin's list", op)
		}
		r.m.Stop()
		if now := CheckpointID(t, r.dir); now != settled {
			t.Fatalf("op %d: the checkpoint changed after Settle, while the manager stopped (%+v, then %+v): a write of this op would land in the next", op, settled, now)
		}
		r.launched = settled
	}
	r.m = r.side.Launch(t, r.dir, r.active)
	r.check(t)
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

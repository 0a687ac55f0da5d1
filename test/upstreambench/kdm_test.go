package upstreambench

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	kdm "github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/internal/checkpoint"
	"github.com/kdm-project/kdm/test/upstreambench/suite"
)

// kdmSide is kdm's device manager under policy p, reported as sub-benchmark name.
func kdmSide(name string, p kdm.Policy) suite.Side {
	return suite.Side{Name: name, Launch: func(tb testing.TB, dir string, pods *suite.PodList) suite.Manager {
		return startKDM(tb, dir, pods, p)
	}}
}

// kdmManager is kdm's Manager.
type kdmManager struct {
	m       *kdm.Manager
	cancel  context.CancelFunc
	updates *suite.Updates
}

// startKDM starts kdm's manager on dir under policy p, with the same pod source.
func startKDM(tb testing.TB, dir string, pods *suite.PodList, p kdm.Policy) suite.Manager {
	tb.Helper()
	m, err := kdm.New(kdm.Config{PluginDir: dir, Logger: logr.Discard(), Policy: p})
	if err != nil {
		tb.Fatalf("kdm device manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Start(ctx, kdm.Sources{ActivePods: pods.Active, SourcesReady: func() bool { return true }}); err != nil {
		cancel()
		tb.Fatalf("starting the kdm device manager: %v", err)
	}
	return &kdmManager{m: m, cancel: cancel, updates: suite.WatchUpdates(m.Updates())}
}

func (k *kdmManager) Allocate(pod *v1.Pod) error {
	return k.m.Allocate(context.Background(), pod, &pod.Spec.Containers[0])
}

func (k *kdmManager) Allocatable() int64 { return k.AllocatableOf(suite.ResourceName) }

func (k *kdmManager) AllocatableOf(resource string) int64 {
	_, alloc, _ := k.m.GetCapacity()
	q := alloc[v1.ResourceName(resource)]
	return q.Value()
}

func (k *kdmManager) Devices(pod *v1.Pod) []string {
	return sortedIDs(k.m.GetDevices(string(pod.UID), pod.Spec.Containers[0].Name)[suite.ResourceName])
}

func (k *kdmManager) Updated() <-chan struct{} { return k.updates.Signal() }

// Settle waits for every write whose change shows in GetCapacity: under the kubelet policy
// the write that follows a list is one (the kdm policy's queued writes are not).
func (k *kdmManager) Settle(testing.TB, suite.FileID) { k.m.WaitForCheckpointWrites() }

func (k *kdmManager) Stop() {
	if k.updates.Stopped() {
		return
	}
	_ = k.m.Stop()
	k.cancel()
	k.updates.Stop()
}

// kdmEntry is e in kdm's checkpoint types.
func kdmEntry(e suite.Entry) checkpoint.PodDevicesEntry {
	ids := make(checkpoint.DevicesPerNUMA, len(e.DeviceIDs))
	for node, devs := range e.DeviceIDs {
		ids[node] = devs
	}
	return checkpoint.PodDevicesEntry{PodUID: e.PodUID, ContainerName: e.ContainerName, ResourceName: e.ResourceName, DeviceIDs: ids, AllocResp: e.AllocResp}
}

// kdmData is d in kdm's checkpoint types.
func kdmData(d *suite.Checkpoint) *checkpoint.Data {
	out := &checkpoint.Data{RegisteredDevices: d.Registered}
	for _, e := range d.Entries {
		out.PodDeviceEntries = append(out.PodDeviceEntries, kdmEntry(e))
	}
	return out
}

// kdmCheckpointEncode is kdm's side of suite.KubeletCheckpointEncode: checkpoint.Encode of
// the same data.
func kdmCheckpointEncode(b *testing.B) {
	d := kdmData(suite.CheckpointBenchData(b))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := checkpoint.Encode(d); err != nil {
			b.Fatal(err)
		}
	}
}

// kdmCheckpointWrite is kdm's side of suite.KubeletCheckpointWrite: its Store (temporary
// file, fsync, rename, directory fsync).
func kdmCheckpointWrite(b *testing.B) {
	d := kdmData(suite.CheckpointBenchData(b))
	s, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: suite.ShortDir(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Write(d); err != nil {
			b.Fatal(err)
		}
	}
}

// kdmChurn is kdm's side of suite.Churn: the Prepared checkpoint its manager keeps, one
// checkpoint.Entry per assignment (its JSON text made once, its part of the checksum reused
// while the entries before it stay the same), and a new Entry only for the arriving pod.
type kdmChurn struct {
	p        checkpoint.Prepared
	arrivals []checkpoint.PodDevicesEntry
	step     int
}

func newKdmChurn(tb testing.TB) *kdmChurn {
	c := suite.NewChurn(tb)
	k := &kdmChurn{}
	for _, e := range c.Current {
		k.p.Entries = append(k.p.Entries, checkpoint.NewEntry(kdmEntry(e)))
	}
	for res, ids := range c.Registered {
		k.p.Registered = append(k.p.Registered, checkpoint.NewRegistered(res, ids))
	}
	for _, e := range c.Arrivals {
		k.arrivals = append(k.arrivals, kdmEntry(e))
	}
	// The manager's entries were written before: their text and sums are known.
	if _, err := checkpoint.EncodePrepared(&k.p); err != nil {
		tb.Fatal(err)
	}
	return k
}

// next replaces the oldest entry with a new Entry and returns the checkpoint to write.
func (k *kdmChurn) next() *checkpoint.Prepared {
	k.p.Entries = append(k.p.Entries[1:], checkpoint.NewEntry(k.arrivals[k.step%len(k.arrivals)]))
	k.step++
	return &k.p
}

// kdmCheckpointEncodeChurn is checkpoint.EncodePrepared of kdm's kept entries after one pod
// left and another arrived. The oldest pod leaves, so kdm hashes every entry again; what it
// keeps is each entry's JSON.
func kdmCheckpointEncodeChurn(b *testing.B) {
	c := newKdmChurn(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := checkpoint.EncodePrepared(c.next()); err != nil {
			b.Fatal(err)
		}
	}
}

// kdmCheckpointWriteChurn is kdmCheckpointEncodeChurn written to disk by Store.WritePrepared,
// with the directory fsync.
func kdmCheckpointWriteChurn(b *testing.B) {
	s, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: suite.ShortDir(b)})
	if err != nil {
		b.Fatal(err)
	}
	c := newKdmChurn(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.WritePrepared(c.next()); err != nil {
			b.Fatal(err)
		}
	}
}

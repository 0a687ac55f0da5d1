package upstreambench

import (
	"testing"

	kubeletcp "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"

	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"

	"github.com/kdm-project/kdm/checkpoint"
)

// checkpointPods and checkpointDevices size the checkpoint benchmarks: a node with 1000
// pods of 4 devices each, split over two NUMA nodes, every response with CDI devices.
const (
	checkpointPods    = 1000
	checkpointDevices = 4
)

// checkpointFile is the kubelet's checkpoint key (a file name in the plugin directory).
const checkpointFile = "kubelet_internal_checkpoint"

// BenchmarkCheckpointEncode measures turning the device manager's state into the file's
// bytes: the checksum plus the JSON (the kubelet's MarshalCheckpoint; kdm's Encode).
func BenchmarkCheckpointEncode(b *testing.B) {
	d := checkpointData(b, checkpointPods, checkpointDevices, checkpointPods*checkpointDevices, true)
	b.Run("pods=1000,devices=4", func(b *testing.B) {
		b.Run("kubelet", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := kubeletCheckpoint(d).MarshalCheckpoint(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("kdm", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := checkpoint.Encode(d); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkCheckpointWrite measures a checkpoint write to disk of the same data: the
// kubelet's checkpoint manager (temporary file, fsync, rename) and kdm's Store (temporary
// file, fsync, rename, directory fsync).
func BenchmarkCheckpointWrite(b *testing.B) {
	d := checkpointData(b, checkpointPods, checkpointDevices, checkpointPods*checkpointDevices, true)
	b.Run("pods=1000,devices=4", func(b *testing.B) {
		b.Run("kubelet", func(b *testing.B) {
			cm, err := checkpointmanager.NewCheckpointManager(shortDir(b))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := cm.CreateCheckpoint(checkpointFile, kubeletCheckpoint(d)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("kdm", func(b *testing.B) {
			s, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: shortDir(b)})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Write(d); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// churn is the checkpoint of a node where pods come and go: checkpointPods pods of
// checkpointDevices devices, and per step the oldest pod leaves and a new one arrives on its
// devices, as after one garbage collection and one Allocate. Each side keeps the entries the
// way its manager does between writes: the kubelet rebuilds its checkpoint data from its pod
// devices on every write; kdm keeps one checkpoint.Entry per assignment (its JSON text made
// once, its part of the checksum reused while the entries before it stay the same) and makes a
// new one only for the new pod. The entries of the arriving pods are built before timing.
type churn struct {
	entries []checkpoint.PodDevicesEntry // current, oldest first
	next    []checkpoint.PodDevicesEntry // arriving pods, in turn
	reg     map[string][]string
	step    int
}

func newChurn(tb testing.TB) *churn {
	d := checkpointData(tb, 2*checkpointPods, checkpointDevices, checkpointPods*checkpointDevices, true)
	c := &churn{entries: d.PodDeviceEntries[:checkpointPods], next: d.PodDeviceEntries[checkpointPods:], reg: d.RegisteredDevices}
	// The arriving pods take the devices the leaving ones held.
	for i := range c.next {
		c.next[i].DeviceIDs = c.entries[i].DeviceIDs
	}
	return c
}

// arrival is the entry of the pod arriving at this step; the pods cycle.
func (c *churn) arrival() checkpoint.PodDevicesEntry {
	e := c.next[c.step%len(c.next)]
	c.step++
	return e
}

// kubeletStep replaces the oldest entry and returns the kubelet's checkpoint of the result.
func (c *churn) kubeletStep() kubeletcp.DeviceManagerCheckpoint {
	c.entries = append(c.entries[1:], c.arrival())
	return kubeletCheckpoint(&checkpoint.Data{PodDeviceEntries: c.entries, RegisteredDevices: c.reg})
}

// kdmChurn is kdm's side: the Prepared checkpoint its manager keeps.
type kdmChurn struct {
	*churn
	p checkpoint.Prepared
}

func newKdmChurn(tb testing.TB) *kdmChurn {
	c := &kdmChurn{churn: newChurn(tb)}
	for _, e := range c.entries {
		c.p.Entries = append(c.p.Entries, checkpoint.NewEntry(e))
	}
	for res, ids := range c.reg {
		c.p.Registered = append(c.p.Registered, checkpoint.NewRegistered(res, ids))
	}
	// The manager's entries were written before: their text and sums are known.
	if _, err := checkpoint.EncodePrepared(&c.p); err != nil {
		tb.Fatal(err)
	}
	return c
}

// step replaces the oldest entry with a new Entry and returns the checkpoint to write.
func (c *kdmChurn) step() *checkpoint.Prepared {
	c.p.Entries = append(c.p.Entries[1:], checkpoint.NewEntry(c.arrival()))
	return &c.p
}

// BenchmarkCheckpointEncodeChurn measures the checkpoint bytes of a write after one pod left
// and another arrived (see churn): the kubelet's MarshalCheckpoint of its rebuilt data, kdm's
// EncodePrepared of its kept entries. The oldest pod leaves, so kdm hashes every entry again;
// what it keeps is each entry's JSON.
func BenchmarkCheckpointEncodeChurn(b *testing.B) {
	b.Run("pods=1000,devices=4", func(b *testing.B) {
		b.Run("kubelet", func(b *testing.B) {
			c := newChurn(b)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.kubeletStep().MarshalCheckpoint(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("kdm", func(b *testing.B) {
			c := newKdmChurn(b)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := checkpoint.EncodePrepared(c.step()); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkCheckpointWriteChurn is BenchmarkCheckpointEncodeChurn written to disk, as
// BenchmarkCheckpointWrite writes.
func BenchmarkCheckpointWriteChurn(b *testing.B) {
	b.Run("pods=1000,devices=4", func(b *testing.B) {
		b.Run("kubelet", func(b *testing.B) {
			cm, err := checkpointmanager.NewCheckpointManager(shortDir(b))
			if err != nil {
				b.Fatal(err)
			}
			c := newChurn(b)
			b.ReportAllocs()
			for b.Loop() {
				if err := cm.CreateCheckpoint(checkpointFile, c.kubeletStep()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("kdm", func(b *testing.B) {
			s, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: shortDir(b)})
			if err != nil {
				b.Fatal(err)
			}
			c := newKdmChurn(b)
			b.ReportAllocs()
			for b.Loop() {
				if err := s.WritePrepared(c.step()); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

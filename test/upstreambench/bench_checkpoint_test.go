package upstreambench

import (
	"testing"

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

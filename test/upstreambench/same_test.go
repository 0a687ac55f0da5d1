package upstreambench

import (
	"bytes"
	"testing"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/test/upstreambench/suite"
)

// TestSameCheckpointBytes checks that every side is given the same checkpoint data: the
// kubelet's MarshalCheckpoint and kdm's Encode produce the same bytes for it.
func TestSameCheckpointBytes(t *testing.T) {
	for _, numa := range []bool{false, true} {
		d := suite.CheckpointData(t, 20, suite.CheckpointDevices, 20*suite.CheckpointDevices, numa)
		want, err := d.Kubelet().MarshalCheckpoint()
		if err != nil {
			t.Fatal(err)
		}
		got, err := checkpoint.Encode(kdmData(d))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("numa=%v: kdm's checkpoint differs from the kubelet's for the same data:\nkdm:     %.300s\nkubelet: %.300s", numa, got, want)
		}
	}
}

// TestKubeletConstructor checks the go:linkname'd constructor: the kubelet's manager serves
// kubelet.sock in the directory given, restores the checkpoint found there and allocates
// through the plugin stub, so the benchmarks measure the kubelet's own code path. kdm does
// the same through its public API, and neither side leaves a goroutine behind once stopped.
func TestKubeletConstructor(t *testing.T) {
	for _, side := range sides() {
		t.Run(side.Name, func(t *testing.T) { suite.CheckConstructor(t, side) })
	}
}

// TestRestartSettles checks that no write of one Restart op runs inside the next: on every
// side the checkpoint write that follows the plugin's list has landed when Settle returns,
// and nothing changes the checkpoint from then until the next op starts.
func TestRestartSettles(t *testing.T) {
	for _, side := range sides() {
		t.Run(side.Name, func(t *testing.T) { suite.CheckRestartSettles(t, side) })
	}
}

// TestFastPathSwitch checks that fastPathsOff reaches package checkpoint with its bits where
// this package expects them: with the spare's bit set, a Store writes through new files and
// leaves no spare; with it clear, its second write leaves one.
func TestFastPathSwitch(t *testing.T) {
	defer func(old uint32) { fastPathsOff = old }(fastPathsOff)
	d := kdmData(suite.CheckpointData(t, 2, 1, 2, false))
	for _, off := range []bool{false, true} {
		fastPathsOff = 0
		if off {
			fastPathsOff = fastPathBits["spare"]
		}
		dir := t.TempDir()
		s, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := s.Write(d); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := spareExists(dir); got == off {
			t.Errorf("spare off=%v: a spare after two writes is %v, want %v", off, got, !off)
		}
	}
}

// TestPluginProcess checks the large benchmarks' plugin process against every side (see
// suite.CheckPluginProcess).
func TestPluginProcess(t *testing.T) {
	for _, side := range sides() {
		t.Run(side.Name, func(t *testing.T) { suite.CheckPluginProcess(t, side) })
	}
}

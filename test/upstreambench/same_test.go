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

// TestPluginProcess checks the large benchmarks' plugin process against every side (see
// suite.CheckPluginProcess).
func TestPluginProcess(t *testing.T) {
	for _, side := range sides() {
		t.Run(side.Name, func(t *testing.T) { suite.CheckPluginProcess(t, side) })
	}
}

package upstreambench

import (
	"bytes"
	"testing"

	"go.uber.org/goleak"

	"github.com/kdm-project/kdm/checkpoint"
)

// TestSameCheckpointBytes checks that both implementations are given the same checkpoint
// data: the kubelet's MarshalCheckpoint and kdm's Encode produce the same bytes for it.
func TestSameCheckpointBytes(t *testing.T) {
	for _, numa := range []bool{false, true} {
		d := checkpointData(t, 20, checkpointDevices, 20*checkpointDevices, numa)
		want, err := kubeletCheckpoint(d).MarshalCheckpoint()
		if err != nil {
			t.Fatal(err)
		}
		got, err := checkpoint.Encode(d)
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
		t.Run(side.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			t.Run("run", func(t *testing.T) { // its cleanups stop everything before the leak check
				dir := shortDir(t)
				seedCheckpoint(t, dir, checkpointData(t, 2, 1, 3, false))
				pods := newPodList()
				pods.add(newPod(0, 1))
				pods.add(newPod(1, 1))
				m := side.start(t, dir, pods)
				if got := m.devices(newPod(1, 1)); len(got) != 1 || got[0] != deviceID(1) {
					t.Fatalf("restored pod 1 holds %v, want [%s]", got, deviceID(1))
				}
				startPlugin(t, dir, deviceList(3))
				waitAllocatable(t, m, 3)
				pod := newPod(2, 1)
				pods.add(pod)
				if err := m.allocate(pod); err != nil {
					t.Fatal(err)
				}
				if got := m.devices(pod); len(got) != 1 || got[0] != deviceID(2) {
					t.Errorf("the new pod holds %v, want the one free device [%s]", got, deviceID(2))
				}
			})
		})
	}
}

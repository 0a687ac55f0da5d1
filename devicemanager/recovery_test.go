package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
)

// TestRecoveryFromEmbedderRecords: with the checkpoint lost (missing, emptied, corrupt) while a
// pod runs, the manager restores the pod's devices from the embedder's records, under both
// policies; the next pod gets other devices, and a valid checkpoint is written again.
func TestRecoveryFromEmbedderRecords(t *testing.T) {
	losses := map[string]func(path string) error{
		"missing": os.Remove,
		"emptied": func(path string) error { return os.WriteFile(path, nil, 0o600) },
		"corrupt": func(path string) error { return os.WriteFile(path, []byte(`{"Data":{"PodDeviceEntries":nu`), 0o600) },
	}
	for _, policy := range []struct {
		name string
		p    Policy
	}{{"kubelet-1.36", KubeletPolicy()}, {"kdm", KDMPolicy()}} {
		for name, lose := range losses {
			t.Run(policy.name+"/"+name, func(t *testing.T) {
				dir := shortDir(t)
				pods := newPodList()
				a := testManager(t, dir, Config{Policy: policy.p}, Sources{ActivePods: pods.active})
				p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2", "g3", "g4"), envAllocator("GPU"))
				waitFor(t, a, "devices", func() bool { return capacityIs(a, gpu, 4, 4) })
				first := testPod("p1", container("c", map[string]int64{gpu: 2}))
				pods.add(first)
				if err := a.Allocate(context.Background(), first, &first.Spec.Containers[0]); err != nil {
					t.Fatal(err)
				}
				held := a.GetContainerAllocations("p1", "c")
				if len(held) != 1 {
					t.Fatalf("GetContainerAllocations = %v, want one entry", held)
				}
				if err := a.Stop(); err != nil {
					t.Fatal(err)
				}
				if err := lose(filepath.Join(dir, checkpoint.FileName)); err != nil {
					t.Fatal(err)
				}

				b := testManager(t, dir, Config{Policy: policy.p}, Sources{
					ActivePods:           pods.active,
					RunningContainers:    []ContainerKey{{PodUID: "p1", ContainerName: "c"}},
					RecoveredAllocations: held,
				})
				if got, want := fmt.Sprint(b.GetDevices("p1", "c")), fmt.Sprint(a.GetDevices("p1", "c")); got != want {
					t.Fatalf("recovered assignment %s, want %s", got, want)
				}
				store, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: dir})
				if err != nil {
					t.Fatal(err)
				}
				data, _, err := store.Read()
				if err != nil || len(data.PodDeviceEntries) != 1 || data.PodDeviceEntries[0].PodUID != "p1" {
					t.Fatalf("checkpoint after recovery: %+v, %v; want p1's entry", data, err)
				}
				waitFor(t, b, "plugin back", func() bool { return capacityIs(b, gpu, 4, 4) })
				second := testPod("p2", container("c", map[string]int64{gpu: 2}))
				pods.add(second)
				if err := b.Allocate(context.Background(), second, &second.Spec.Containers[0]); err != nil {
					t.Fatal(err)
				}
				for id := range b.GetDevices("p2", "c")[gpu] {
					if _, taken := b.GetDevices("p1", "c")[gpu][id]; taken {
						t.Fatalf("device %s given to p2 while p1 holds it", id)
					}
				}
				_ = p
			})
		}
	}
}

// TestUnreadableCheckpointRefusesStart: a checkpoint that exists but cannot be read (here a
// directory in its place; permissions in the end-to-end test) fails Start with a message naming
// the file, and nothing is replaced. ContinueOnUnreadableCheckpoint restores the kubelet's way.
func TestUnreadableCheckpointRefusesStart(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, checkpoint.FileName)
	if err := os.MkdirAll(path, 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{PluginDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(context.Background(), Sources{})
	var ue *UnreadableCheckpointError
	if !errors.As(err, &ue) || ue.Path != path {
		t.Fatalf("Start = %v, want an UnreadableCheckpointError for %s", err, path)
	}
	want := fmt.Sprintf("cannot read the device checkpoint %s: read: not a regular file (a directory); refusing to start", path)
	if got := err.Error(); len(got) < len(want) || got[:len(want)] != want {
		t.Fatalf("error text %q, want it to start with %q", got, want)
	}
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		t.Fatalf("the unreadable path was touched: %v, %v", fi, err)
	}
	_ = m.Stop()

	// The kubelet's way: start with empty state (testManager fails the test if Start does).
	testManager(t, dir, Config{ContinueOnUnreadableCheckpoint: true}, Sources{})
}

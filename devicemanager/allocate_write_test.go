package devicemanager

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/checkpoint"
)

// writeCounter is a logger that counts the checkpoint store's "Wrote checkpoint file" lines.
func writeCounter() (logr.Logger, *atomic.Int64) {
	var n atomic.Int64
	log := funcr.New(func(_, args string) {
		if strings.Contains(args, `"Wrote checkpoint file"`) {
			n.Add(1)
		}
	}, funcr.Options{Verbosity: 4})
	return log, &n
}

// checkpointedPods reads the checkpoint in dir and returns the UIDs of the pods it records.
func checkpointedPods(t *testing.T, dir string) map[string]bool {
	t.Helper()
	out, err := readCheckpointedPods(dir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readCheckpointedPods(dir string) (map[string]bool, error) {
	raw, err := os.ReadFile(filepath.Join(dir, checkpoint.FileName))
	if err != nil {
		return nil, err
	}
	data, _, err := checkpoint.Decode(raw)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range data.PodDeviceEntries {
		out[e.PodUID] = true
	}
	return out, nil
}

// gcFixture allocates pod "gone" one device, then drops it from the active pods, so that the
// next Allocate garbage-collects it. It returns the manager, its directory, its active pods
// and the write counter, zeroed.
func gcFixture(t *testing.T, devs int) (*Manager, string, *podList, *atomic.Int64) {
	t.Helper()
	dir := shortDir(t)
	pods := newPodList()
	log, writes := writeCounter()
	m := testManager(t, dir, Config{Logger: log}, Sources{ActivePods: pods.active})
	testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, ids("dev-", devs)...), envAllocator("GPU"))
	waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, int64(devs), int64(devs)) })
	gone := testPod("gone", container("c", map[string]int64{gpu: 1}))
	pods.add(gone)
	if err := m.Allocate(context.Background(), gone, &gone.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	pods.remove("gone")
	m.WaitForCheckpointWrites()
	writes.Store(0)
	return m, dir, pods, writes
}

func TestAllocateWritesGarbageCollectionWithTheAllocation(t *testing.T) {
	m, dir, pods, writes := gcFixture(t, 2)
	next := testPod("next", container("c", map[string]int64{gpu: 1}))
	pods.add(next)
	if err := m.Allocate(context.Background(), next, &next.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if got := writes.Load(); got != 1 {
		t.Errorf("Allocate after garbage collection wrote the checkpoint %d times, want 1", got)
	}
	if got := checkpointedPods(t, dir); got["gone"] || !got["next"] {
		t.Errorf("checkpointed pods = %v, want next without gone", got)
	}
}

func TestAllocateFailureStillWritesGarbageCollection(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  map[string]int64
	}{
		{"rejected", map[string]int64{gpu: 5}},
		{"nothing to allocate", map[string]int64{gpu: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, dir, pods, writes := gcFixture(t, 2)
			next := testPod("next", container("c", tc.req))
			pods.add(next)
			_ = m.Allocate(context.Background(), next, &next.Spec.Containers[0])
			if got := writes.Load(); got != 1 {
				t.Errorf("Allocate wrote the checkpoint %d times, want 1 (the garbage collection)", got)
			}
			if got := checkpointedPods(t, dir); got["gone"] {
				t.Errorf("checkpointed pods = %v: the collected pod is still on disk", got)
			}
		})
	}
}

func TestUpdateAllocatedDevicesWritesRemovals(t *testing.T) {
	m, dir, _, writes := gcFixture(t, 2)
	m.UpdateAllocatedDevices()
	if got := writes.Load(); got != 1 {
		t.Errorf("UpdateAllocatedDevices wrote the checkpoint %d times, want 1", got)
	}
	if got := checkpointedPods(t, dir); got["gone"] {
		t.Errorf("checkpointed pods = %v: the collected pod is still on disk", got)
	}
}

// TestDeferredAdmissionWritesGarbageCollectionFirst: an Allocate that garbage-collects a pod
// and then waits for a plugin has written the removal before it waits.
func TestDeferredAdmissionWritesGarbageCollectionFirst(t *testing.T) {
	pods := newPodList()
	type onDisk struct {
		pods map[string]bool
		err  error
	}
	deferred := make(chan onDisk, 1)
	var dir string
	cfg := Config{
		Clock:  clocktesting.NewFakeClock(time.Now()),
		Policy: Policy{DeferAdmission: true, DeferAdmissionTimeout: time.Minute},
		OnAdmissionDeferred: func(string, string, string) {
			pods, err := readCheckpointedPods(dir)
			deferred <- onDisk{pods, err}
		},
	}
	m, d := restartedWithCheckpoint(t, cfg, pods)
	dir = d
	pods.remove("old")
	next := testPod("next", container("c", map[string]int64{gpu: 1}))
	pods.add(next)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Allocate(ctx, next, &next.Spec.Containers[0]) }()
	select {
	case got := <-deferred:
		if got.err != nil {
			t.Fatalf("reading the checkpoint while waiting: %v", got.err)
		}
		if got.pods["old"] {
			t.Errorf("checkpointed pods while waiting = %v: the collected pod is still on disk", got.pods)
		}
	case err := <-done:
		t.Fatalf("admission did not wait: %v", err)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("Allocate succeeded without the plugin")
	}
}

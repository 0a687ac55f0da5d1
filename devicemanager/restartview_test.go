package devicemanager

import (
	"context"
	"regexp"
	"slices"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// syncRecorder is a logger that records, for each "Wrote checkpoint file" line of the
// checkpoint store, whether the write synced the directory.
func syncRecorder() (logr.Logger, func() []bool) {
	var mu sync.Mutex
	var synced []bool
	log := funcr.New(func(_, args string) {
		if m := wroteLine.FindStringSubmatch(args); m != nil {
			mu.Lock()
			synced = append(synced, m[1] == "true")
			mu.Unlock()
		}
	}, funcr.Options{Verbosity: 4})
	return log, func() []bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(synced)
	}
}

var wroteLine = regexp.MustCompile(`"Wrote checkpoint file".*"dirSynced"=(\w+)`)

// TestDeviceListWritesSkipTheDirectorySync: under both policies, a checkpoint write that
// changes nothing a restart reads (a health flip: the registered device list only) replaces
// the file without syncing the directory; the first list of a resource (a new registered
// resource) and an allocation are written durably.
func TestDeviceListWritesSkipTheDirectorySync(t *testing.T) {
	for name, policy := range map[string]Policy{"kubelet": KubeletPolicy(), "kdm": KDMPolicy()} {
		t.Run(name, func(t *testing.T) {
			logger, writes := syncRecorder()
			dir := shortDir(t)
			pods := newPodList()
			m := testManager(t, dir, Config{Logger: logger, Policy: policy}, Sources{ActivePods: pods.active})
			p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g0", "g1"))
			waitFor(t, m, "2 devices", func() bool { return capacityIs(m, gpu, 2, 2) })
			poll(t, "the first list written", func() bool { return len(writes()) >= 1 })
			if got := writes(); !got[0] {
				t.Fatalf("the first write, of a new resource, did not sync the directory: %v", got)
			}
			before := len(writes())

			if err := p.SetHealth("g1", pluginapi.Unhealthy); err != nil {
				t.Fatal(err)
			}
			waitFor(t, m, "g1 unhealthy", func() bool { return capacityIs(m, gpu, 2, 1) })
			poll(t, "the flip written", func() bool { return len(writes()) > before })
			m.WaitForCheckpointWrites()
			if got := writes()[before:]; slices.Contains(got, true) {
				t.Fatalf("health flip writes: %v, want none to sync the directory", got)
			}
			before = len(writes())

			pod := testPod("p1", container("c", map[string]int64{gpu: 1}))
			pods.add(pod)
			if err := m.Allocate(context.Background(), pod, &pod.Spec.Containers[0]); err != nil {
				t.Fatal(err)
			}
			if got := writes()[before:]; len(got) == 0 || !got[len(got)-1] {
				t.Fatalf("the allocation's write: %v, want it synced", got)
			}
		})
	}
}

package devicemanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
)

// write is how the checkpoint store reported one write: whether it synced the directory,
// whether it left that sync to a goroutine, and whether it went through the spare.
type write struct{ dirSynced, viaSpare bool }

// syncRecorder is a logger that records, for each "Wrote checkpoint file" line of the
// checkpoint store, whether the write synced the directory and went through the spare.
func syncRecorder() (logr.Logger, func() []write) {
	var mu sync.Mutex
	var writes []write
	log := funcr.New(func(_, args string) {
		if m := wroteLine.FindStringSubmatch(args); m != nil {
			mu.Lock()
			writes = append(writes, write{m[1] == "true", m[2] == "true"})
			mu.Unlock()
		}
	}, funcr.Options{Verbosity: 4})
	return log, func() []write {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(writes)
	}
}

var wroteLine = regexp.MustCompile(`"Wrote checkpoint file".*"dirSynced"=(\w+) "viaSpare"=(\w+)`)

// TestDeviceListWritesSkipTheDirectorySync: under both policies, a checkpoint write that
// changes nothing a restart reads (a health flip: the registered device list only) asks the
// store for no directory sync; the first list of a resource (a new registered resource) and
// an allocation are written durably. A directory planted at the spare's name keeps the store
// on new temporary files, where the request shows; through the spare, which the second run
// uses, every write has the directory synced (checkpoint.Store.Write says why).
func TestDeviceListWritesSkipTheDirectorySync(t *testing.T) {
	for name, policy := range map[string]Policy{"kubelet": KubeletPolicy(), "kdm": KDMPolicy()} {
		for _, spare := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s,spare=%v", name, spare), func(t *testing.T) {
				logger, writes := syncRecorder()
				dir := shortDir(t)
				if !spare {
					for _, name := range []string{checkpoint.SpareFileName, checkpoint.SecondSpareFileName} {
						if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
							t.Fatal(err)
						}
					}
				}
				pods := newPodList()
				m := testManager(t, dir, Config{Logger: logger, Policy: policy}, Sources{ActivePods: pods.active})
				p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g0", "g1"))
				waitFor(t, m, "2 devices", func() bool { return capacityIs(m, gpu, 2, 2) })
				poll(t, "the first list written", func() bool { return len(writes()) >= 1 })
				if got := writes(); !got[0].dirSynced {
					t.Fatalf("the first write, of a new resource, did not sync the directory: %v", got)
				}
				before := len(writes())

				if err := p.SetHealth("g1", pluginapi.Unhealthy); err != nil {
					t.Fatal(err)
				}
				waitFor(t, m, "g1 unhealthy", func() bool { return capacityIs(m, gpu, 2, 1) })
				poll(t, "the flip written", func() bool { return len(writes()) > before })
				m.WaitForCheckpointWrites()
				flips := writes()[before:]
				for _, w := range flips {
					if w.viaSpare != spare {
						t.Fatalf("health flip writes: %v, want viaSpare=%v", flips, spare)
					}
				}
				for _, w := range flips {
					if w.dirSynced != spare {
						t.Fatalf("health flip writes: %v, want the directory synced only through the spare", flips)
					}
				}
				before = len(writes())

				pod := testPod("p1", container("c", map[string]int64{gpu: 1}))
				pods.add(pod)
				if err := m.Allocate(context.Background(), pod, &pod.Spec.Containers[0]); err != nil {
					t.Fatal(err)
				}
				if got := writes()[before:]; len(got) == 0 || !got[len(got)-1].dirSynced {
					t.Fatalf("the allocation's write: %v, want it synced", got)
				}
			})
		}
	}
}

package devicemanager

import (
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/state"
)

// TestConcurrentAdmissionStress: 8 goroutines admit 1,000 pods against 64 devices while pods
// end, garbage collection runs and the plugin flips device health. No device is ever held by
// two live containers, and nothing is left once every pod has ended.
func TestConcurrentAdmissionStress(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test: 1,000 pods; run by make test")
	}
	f := newAllocFixture(t, Config{})
	p := f.plugin(gpu, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, devices(pluginapi.Healthy, ids("g", 64)...))

	const workers, total = 8, 1000
	var next, admitted atomic.Int64
	stop := make(chan struct{})
	var wg, flipper sync.WaitGroup
	flipper.Add(1)
	go func() { // health flips
		defer flipper.Done()
		r := rand.New(rand.NewSource(1))
		for {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("g%d", r.Intn(64))
			_ = p.SetHealth(id, pluginapi.Unhealthy)
			_ = p.SetHealth(id, pluginapi.Healthy)
		}
	}()
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(w)))
			var mine []string
			for {
				i := next.Add(1)
				if i > total {
					break
				}
				uid := fmt.Sprintf("pod-%04d", i)
				pod := testPod(uid, container("c", map[string]int64{gpu: int64(1 + r.Intn(4))}))
				if err := f.admit(pod); err != nil {
					f.pods.remove(uid)
				} else {
					admitted.Add(1)
					mine = append(mine, uid)
				}
				if len(mine) > 2 || (len(mine) > 0 && r.Intn(2) == 0) {
					k := r.Intn(len(mine))
					f.pods.remove(mine[k])
					mine = append(mine[:k], mine[k+1:]...)
					f.m.UpdateAllocatedDevices()
				}
				if err := f.checkNoDoubleAssignment(); err != nil {
					errs <- err
					return
				}
			}
			for _, uid := range mine {
				f.pods.remove(uid)
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	flipper.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if admitted.Load() == 0 {
		t.Fatalf("no pod was admitted")
	}
	f.m.UpdateAllocatedDevices()
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if pods, allocated, pending := len(f.m.st.PodUIDs()), f.m.st.AllocatedCount(gpu), f.m.st.Reservations(); pods+allocated+pending != 0 {
		t.Fatalf("leak after every pod ended: %d pods, %d allocated, %d pending", pods, allocated, pending)
	}
	t.Logf("admitted %d of %d pods", admitted.Load(), total)
}

// checkNoDoubleAssignment verifies that no device is held by two live app containers.
func (f *allocFixture) checkNoDoubleAssignment() error {
	live := map[string]bool{}
	for _, p := range f.pods.active() {
		live[string(p.UID)] = true
	}
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	owner := map[string]string{}
	var err error
	f.m.st.EachAllocation(func(uid, c, res string, a *state.Allocation) {
		if !live[uid] || res != gpu || err != nil {
			return
		}
		for id := range a.IDs() {
			if prev, ok := owner[id]; ok {
				err = fmt.Errorf("device %s held by %s and %s/%s", id, prev, uid, c)
				return
			}
			owner[id] = uid + "/" + c
		}
	})
	return err
}

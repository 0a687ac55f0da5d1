package devicemanager

import (
	"context"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin/plugintest"
)

// TestHangingAllocateDelaysNoOtherResource: under each policy (the kubelet's has no Allocate
// deadline, so the hang lasts as long as the plugin's), while one resource's plugin hangs in
// Allocate, a pod of another resource is admitted and the status views answer; the hanging
// admission is still in flight afterwards, and ends, leaving nothing reserved, only when its
// caller gives up.
func TestHangingAllocateDelaysNoOtherResource(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy Policy
	}{{"policy=kubelet", KubeletPolicy()}, {"policy=kdm", KDMPolicy()}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newAllocFixture(t, Config{Policy: tc.policy})
			hung := f.plugin("example.com/hanging", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "h0"))
			f.plugin(gpu, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g0"))
			hung.SetFaults(plugintest.Faults{HangAllocate: true})

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stuckPod := testPod("stuck", container("c", map[string]int64{"example.com/hanging": 1}))
			f.pods.add(stuckPod)
			stuck := make(chan error, 1)
			go func() { stuck <- f.m.Allocate(ctx, stuckPod, &stuckPod.Spec.Containers[0]) }()
			wctx, wcancel := context.WithTimeout(context.Background(), waitTimeout)
			defer wcancel()
			if err := hung.WaitForCalls(wctx, func(c plugintest.Calls) bool { return len(c.Allocate) == 1 }); err != nil {
				t.Fatalf("the hanging plugin never saw Allocate: %v", err)
			}

			other := make(chan error, 1)
			go func() {
				err := f.admit(testPod("other", container("c", map[string]int64{gpu: 1})))
				f.m.Resources()
				f.m.GetCapacity()
				other <- err
			}()
			select {
			case err := <-other:
				if err != nil {
					t.Fatalf("the GPU pod was not admitted while another plugin hangs: %v", err)
				}
			case <-time.After(waitTimeout):
				t.Fatalf("the GPU pod's admission waited %v behind another resource's hanging Allocate", waitTimeout)
			}
			select {
			case err := <-stuck:
				t.Fatalf("the hanging admission ended before its caller gave up: %v", err)
			default:
			}

			cancel()
			if err := <-stuck; err == nil {
				t.Fatalf("the abandoned admission succeeded")
			}
			f.m.mu.Lock()
			defer f.m.mu.Unlock()
			if n := f.m.st.Reservations(); n != 0 {
				t.Fatalf("the abandoned admission left %d reservations", n)
			}
		})
	}
}

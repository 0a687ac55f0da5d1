package devicemanager

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/internal/silentsock"
)

// registerFlood runs workers goroutines, each registering its own silent socket in a loop
// (resource(i, n) names the resource of worker i's n-th call), until stop is called, which
// waits for them. exhausted counts the calls answered with ResourceExhausted; held reports
// whether the manager has connected to every silent socket, that is, whether every worker's
// call is in flight there.
func registerFlood(t *testing.T, client pluginapi.RegistrationClient, dir string, workers int,
	resource func(worker, call int) string) (exhausted *atomic.Int64, held func() bool, stop func()) {
	t.Helper()
	var sockets []*silentsock.Socket
	for i := range workers {
		sockets = append(sockets, silentsock.Listen(t, filepath.Join(dir, fmt.Sprintf("silent-%d.sock", i))))
	}
	held = func() bool {
		for _, s := range sockets {
			if s.Accepted() == 0 {
				return false
			}
		}
		return true
	}
	exhausted = new(atomic.Int64)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				_, err := client.Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version,
					ResourceName: resource(i, n), Endpoint: fmt.Sprintf("silent-%d.sock", i)})
				if status.Code(err) == codes.ResourceExhausted {
					exhausted.Add(1)
				}
			}
		}()
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return exhausted, held, stop
}

// floodRegisterDeadline is how long a live plugin may take to register while silent sockets
// flood kubelet.sock: its first Register, or its SDK's retries after 500 ms and 1.5 s. Without
// the flood it takes milliseconds; with the old refusing limiter, the silent dials' 10 s.
const floodRegisterDeadline = 2 * time.Second

// TestRegisterFloodOfSilentPlugins: 64 registrants whose sockets accept but never answer
// register in a loop, twice as many as the manager dials at once (maxRegistersTotal), naming
// other resources or the live plugin's own. Once the manager holds every flood call (it has
// connected to every silent socket), a live plugin (the SDK, real sockets) starting during the
// flood still registers within floodRegisterDeadline: the flood's calls wait for their
// sockets to answer without taking the dials that a plugin which answers needs.
func TestRegisterFloodOfSilentPlugins(t *testing.T) {
	const workers = 64
	for _, tc := range []struct {
		name     string
		resource func(worker, call int) string
	}{
		{"other resources", func(w, n int) string { return fmt.Sprintf("flood.example/r%d-%d", w, n) }},
		{"the live plugin's resource", func(int, int) string { return gpu }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			m := testManager(t, dir, Config{Logger: ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0)))}, Sources{})
			exhausted, held, stop := registerFlood(t, registrationClient(t, m.SocketPath()), dir, workers, tc.resource)
			deadline := time.Now().Add(waitTimeout)
			for !held() { // every flood call is in flight
				if time.Now().After(deadline) {
					t.Fatal("the manager never held every flood call")
				}
				time.Sleep(time.Millisecond)
			}

			started := time.Now()
			testPlugin(t, dir, gpu, "live.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "a", "b"),
				func(c *deviceplugin.Config) { c.KeepRegistering = true })
			if !registersWithin(m, floodRegisterDeadline, func() bool { return capacityIs(m, gpu, 2, 2) }) {
				stop()
				waitFor(t, m, "the live plugin's devices once the flood stopped", func() bool { return capacityIs(m, gpu, 2, 2) })
				t.Fatalf("the live plugin did not register within %v of its start while silent registrants flooded "+
					"kubelet.sock; it did %v after its start, once the flood stopped", floodRegisterDeadline, time.Since(started))
			}
			t.Logf("the live plugin registered %v after its start, during the flood (%d flood calls got ResourceExhausted)",
				time.Since(started), exhausted.Load())
			stop()
			m.mu.Lock()
			defer m.mu.Unlock()
			for res, info := range m.endpoints {
				if res != gpu && info.ep != nil {
					t.Errorf("flood resource %s has an endpoint", res)
				}
			}
			if info := m.endpoints[gpu]; info.ep == nil || filepath.Base(info.ep.SocketPath()) != "live.sock" {
				t.Errorf("%s is served by %+v, want live.sock", gpu, info.ep)
			}
		})
	}
}

// registersWithin reports whether cond holds within limit, re-checking at every device or
// endpoint change of m.
func registersWithin(m *Manager, limit time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		changed := m.deviceChange
		m.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return cond()
		}
	}
}

package devicemanager

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
	"github.com/kdm-project/kdm/endpoint"
)

// registerWithin is how soon after the manager starts (or restarts) a plugin that was already
// running must be registered: well under the 10 s dial timeout that a dial to a deleted socket
// used to cost, and above the jitter of a loaded test machine.
const registerWithin = 2 * time.Second

// waitWithin is waitFor with its own deadline d; it returns how long cond took.
func waitWithin(t *testing.T, m *Manager, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		changed := m.deviceChange
		m.mu.Unlock()
		if cond() {
			return time.Since(start)
		}
		select {
		case <-changed:
		case <-deadline.C:
			c, a, _ := m.GetCapacity()
			t.Fatalf("%s: not within %v (capacity %v, allocatable %v)", what, d, c, a)
		}
	}
}

// startPluginAsync starts p in the background, as a plugin process does while no manager
// listens yet; Start's result is checked at cleanup, after p.Stop.
func startPluginAsync(t *testing.T, p *plugintest.Plugin) {
	t.Helper()
	var wg sync.WaitGroup
	var startErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		startErr = p.Start(context.Background())
	}()
	t.Cleanup(func() {
		p.Stop()
		wg.Wait()
		if startErr != nil && !errors.Is(startErr, deviceplugin.ErrStopped) {
			t.Errorf("plugin Start: %v", startErr)
		}
	})
}

// TestPluginStartedBeforeManager (issue 13 item 9): a plugin that starts 1 s before the manager
// has its socket deleted by the manager's start-up cleanup while its Register is pending; it
// must still be registered within registerWithin of the manager's start, not after a dial
// timeout or a long connect backoff.
func TestPluginStartedBeforeManager(t *testing.T) {
	dir := shortDir(t)
	p, err := plugintest.New(deviceplugin.Config{
		ResourceName:    gpu,
		PluginDir:       dir,
		SocketName:      "gpu.sock",
		Devices:         devices(pluginapi.Healthy, "g1", "g2"),
		KeepRegistering: true, // as the reference GPU plugin
		Logger:          ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))),
	})
	if err != nil {
		t.Fatal(err)
	}
	startPluginAsync(t, p)
	time.Sleep(time.Second)
	m := testManager(t, dir, Config{}, Sources{})
	took := waitWithin(t, m, registerWithin, "plugin registered after the manager started",
		func() bool { return capacityIs(m, gpu, 2, 2) })
	t.Logf("registered %v after the manager started", took)
}

// TestPluginReRegistersAfterManagerRestart (issue 13 item 9): after a manager restart (cleanup
// of the plugin's socket, a fresh kubelet.sock) the SDK plugin serves its socket again and
// registers within registerWithin.
func TestPluginReRegistersAfterManagerRestart(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
	waitFor(t, m, "first registration", func() bool { return capacityIs(m, gpu, 2, 2) })
	for round := 2; round <= 4; round++ {
		if err := m.Stop(); err != nil {
			t.Fatal(err)
		}
		m = testManager(t, dir, Config{}, Sources{})
		took := waitWithin(t, m, registerWithin, "plugin registered again after a manager restart",
			func() bool { return capacityIs(m, gpu, 2, 2) })
		if err := p.WaitForRegistrations(context.Background(), round); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: registered %v after the manager restarted", round, took)
	}
}

// capacityWatch records, from the moment it starts, whether the resource's allocatable count
// was ever seen at 0 after first being positive. It checks on every device or endpoint change
// (the manager signals each one), so a dip that lasts until the next change cannot be missed.
type capacityWatch struct {
	mu     sync.Mutex
	seenUp bool
	dipped bool
	stop   context.CancelFunc
	done   chan struct{}
}

func watchAllocatable(m *Manager, res string) *capacityWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &capacityWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			m.mu.Lock()
			changed := m.deviceChange
			m.mu.Unlock()
			_, a, _ := m.GetCapacity()
			n := quantity(a, res)
			w.mu.Lock()
			if n > 0 {
				w.seenUp = true
			} else if w.seenUp {
				w.dipped = true
			}
			w.mu.Unlock()
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	return w
}

// result stops the watch and reports (seen positive, dipped to 0 afterwards).
func (w *capacityWatch) result() (seenUp, dipped bool) {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seenUp, w.dipped
}

// TestDoubleRegisterKeepsFirstStream (issue 13 item 5): a plugin that registers twice in a
// row and exits when its ListAndWatch stream is closed survives the second registration: the
// replaced instance's stream stays open (its lists are ignored), the plugin never sees a
// stream closed, and allocatable never dips to 0. The kept stream ends with the manager's
// Stop, which the test's goroutine-leak check covers.
func TestDoubleRegisterKeepsFirstStream(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	w := watchAllocatable(m, gpu)
	p, err := plugintest.New(deviceplugin.Config{
		ResourceName: gpu,
		PluginDir:    dir,
		SocketName:   "rocm.sock",
		Devices:      devices(pluginapi.Healthy, "g1", "g2"),
		Logger:       ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))),
	})
	if err != nil {
		t.Fatal(err)
	}
	p.SetFaults(plugintest.DoubleRegisterExitOnClose())
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("plugin Start: %v", err)
	}
	t.Cleanup(p.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := p.WaitForRegistrations(ctx, 2); err != nil {
		t.Fatalf("plugin did not register twice: %v (exited: %v)", err, p.Exited())
	}
	// The second instance's stream opens, unless the plugin exits first (it stops then).
	_ = p.WaitForStreams(ctx, 2)
	// A closed stream makes the plugin exit at once; give a late one time to show.
	time.Sleep(500 * time.Millisecond)
	seenUp, dipped := w.result()
	if err := p.Exited(); err != nil {
		t.Errorf("the plugin exited after its second registration: %v", err)
	}
	if n := p.Calls().StreamsClosedByManager; n != 0 {
		t.Errorf("the manager closed %d ListAndWatch stream(s) of the plugin, want 0", n)
	}
	if n := p.OpenStreams(); n != 2 {
		t.Errorf("%d ListAndWatch streams open, want 2 (the replaced instance's is kept)", n)
	}
	if !seenUp || dipped {
		t.Errorf("allocatable seen positive: %v, dipped to 0 afterwards: %v; want positive and no dip", seenUp, dipped)
	}
	if !capacityIs(m, gpu, 2, 2) {
		c, a, _ := m.GetCapacity()
		t.Fatalf("capacity %v allocatable %v after the double registration, want 2/2", c, a)
	}
	// The replaced instance's lists are ignored, the current one's applied: both streams
	// carry the same update, and it is applied exactly as one.
	if err := p.SetHealth("g2", pluginapi.Unhealthy); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "health update through the current stream", func() bool { return capacityIs(m, gpu, 2, 1) })
}

// TestReplacedInstanceStreamEndHarmless (issue 13 item 5): when the plugin itself ends the
// replaced instance's kept stream, the current instance stays healthy and connected.
func TestReplacedInstanceStreamEndHarmless(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	old := testPlugin(t, dir, gpu, "old.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
	waitFor(t, m, "old instance", func() bool { return capacityIs(m, gpu, 2, 2) })
	w := watchAllocatable(m, gpu)
	cur := testPlugin(t, dir, gpu, "new.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
	waitFor(t, m, "new instance current", func() bool { return m.currentSocket(gpu) == cur.SocketPath() })
	if n := old.OpenStreams(); n != 1 {
		t.Fatalf("replaced instance has %d open streams, want 1 (kept open)", n)
	}
	old.Stop() // ends the kept stream from the plugin's side
	if err := cur.SetHealth("g1", pluginapi.Unhealthy); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "current instance's update", func() bool { return capacityIs(m, gpu, 2, 1) })
	if _, dipped := w.result(); dipped {
		t.Fatalf("allocatable dipped to 0 when the replaced instance's stream ended")
	}
	m.mu.Lock()
	stopped := m.endpoints[gpu].ep.IsStopped()
	m.mu.Unlock()
	if stopped {
		t.Fatalf("the replaced instance's stream end stopped the current endpoint")
	}
}

// rawPlugin is a bare DevicePlugin server, as third-party plugins are built: it serves one
// device list and knows nothing of kdm's SDK.
type rawPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devs []*pluginapi.Device
}

func (r *rawPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (r *rawPlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: r.devs}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

// serveRaw serves r on path (replacing a file there) until the returned stop is called.
func serveRaw(r *rawPlugin, path string) (stop func(), err error) {
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	return func() {
		srv.Stop()
		<-done
	}, nil
}

// TestPendingRegisterForDeletedSocket (issue 13 item 9): a plugin that was serving before the
// manager started has its socket deleted by the start-up cleanup, and its Register (sent once
// kubelet.sock answers) names that deleted socket. Like many real plugins, it serves its socket
// again only after Register fails. The manager must fail that Register at once, naming the
// path, not after its 10 s dial timeout, so that the retry registers the plugin within
// registerWithin of the manager's start.
func TestPendingRegisterForDeletedSocket(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "raw.sock")
	plugin := &rawPlugin{devs: devices(pluginapi.Healthy, "g1", "g2")}
	stop, err := serveRaw(plugin, sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	m := testManager(t, dir, Config{}, Sources{}) // default 10 s dial timeout
	if _, err := os.Stat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the manager's start-up cleanup left the plugin socket (stat: %v)", err)
	}
	client := registrationClient(t, m.SocketPath())
	req := &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "raw.sock", ResourceName: gpu}

	// The plugin: Register; on failure serve the socket again and Register once more.
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg                 sync.WaitGroup
		firstErr, retryErr error
		stopAgain          func()
	)
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		if _, firstErr = client.Register(ctx, req); firstErr == nil {
			return
		}
		if stopAgain, retryErr = serveRaw(plugin, sock); retryErr == nil {
			_, retryErr = client.Register(ctx, req)
		}
	}()
	joined := false
	join := func() {
		if !joined {
			cancel()
			wg.Wait()
			joined = true
		}
		if stopAgain != nil {
			stopAgain()
			stopAgain = nil
		}
	}
	t.Cleanup(join)
	waitWithin(t, m, registerWithin, "plugin registered after its Register for a deleted socket",
		func() bool { return capacityIs(m, gpu, 2, 2) })
	select { // the plugin's Register returns just after the manager has applied its list
	case <-done:
	case <-time.After(waitTimeout):
	}
	join()
	if firstErr == nil {
		t.Fatalf("Register naming a deleted socket succeeded")
	}
	if retryErr != nil {
		t.Errorf("Register after serving the socket again: %v", retryErr)
	}
	if msg := status.Convert(firstErr).Message(); !strings.HasPrefix(msg, "failed to dial device plugin: ") || !strings.Contains(msg, sock) {
		t.Errorf("Register for a deleted socket: %q, want the kubelet's prefix and the socket path", msg)
	}
}

// TestReplacedInstancesBounded: a plugin that registers again and again keeps at most
// maxReplacedInstances replaced streams open besides the current one; older ones are closed,
// and none of this touches the resource's devices.
func TestReplacedInstancesBounded(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	p := testPlugin(t, dir, gpu, "loop.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1"),
		func(c *deviceplugin.Config) { c.Registration = deviceplugin.NoRegistration })
	client := registrationClient(t, m.SocketPath())
	req := &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "loop.sock", ResourceName: gpu}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	const registers = maxReplacedInstances + 3
	for i := 1; i <= registers; i++ {
		if _, err := client.Register(ctx, req); err != nil {
			t.Fatalf("Register %d: %v", i, err)
		}
		if err := p.WaitForStreams(ctx, i); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	want := 1 + maxReplacedInstances
	deadline := time.Now().Add(waitTimeout)
	for p.OpenStreams() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams open after %d registrations, want %d", p.OpenStreams(), registers, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := p.Calls().StreamsClosedByManager; got != registers-want {
		t.Fatalf("manager closed %d streams, want %d (the oldest replaced instances)", got, registers-want)
	}
	m.mu.Lock()
	kept := len(m.replaced[gpu])
	m.mu.Unlock()
	if kept != maxReplacedInstances {
		t.Fatalf("%d replaced instances tracked, want %d", kept, maxReplacedInstances)
	}
	if !capacityIs(m, gpu, 1, 1) {
		t.Fatalf("closing replaced instances' streams touched the resource")
	}
}

// TestRegisterDialTimeoutText (issue 13 item 2, the text): a Register naming a socket file
// that nobody serves fails after the dial timeout with the kubelet's message exactly; the
// socket path and the connect error are only logged.
func TestRegisterDialTimeoutText(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{Endpoint: endpoint.Config{DialTimeout: 300 * time.Millisecond}}, Sources{})
	// A stale socket: bound, then closed without unlinking, so connect is refused.
	lis, err := net.Listen("unix", filepath.Join(dir, "stale.sock"))
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = lis.Close()
	_, err = registrationClient(t, m.SocketPath()).Register(context.Background(),
		&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "stale.sock", ResourceName: gpu})
	if got, want := status.Convert(err).Message(), "failed to dial device plugin: context deadline exceeded"; got != want {
		t.Fatalf("Register for a socket nobody serves: %q, want the kubelet's %q", got, want)
	}
}

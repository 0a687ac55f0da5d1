package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// waitTimeout bounds every wait for an event; it is a safety net, never the expected path.
const waitTimeout = 10 * time.Second

const gpu = "example.com/gpu"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// shortDir is a fresh directory with a short path (unix socket paths are limited to 107
// bytes, and t.TempDir() can be long), removed at cleanup.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kdm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func devices(health string, ids ...string) []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(ids))
	for i, id := range ids {
		out[i] = &pluginapi.Device{ID: id, Health: health}
	}
	return out
}

// newPlugin builds a plugin with a test logger and stops it at cleanup (not started).
func newPlugin(t testing.TB, cfg Config) *Plugin {
	t.Helper()
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4)))
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

// startPlugin is newPlugin plus a successful Start.
func startPlugin(t testing.TB, cfg Config) *Plugin {
	t.Helper()
	p := newPlugin(t, cfg)
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return p
}

// waitCtx is a context bounded by waitTimeout.
func waitCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// dial connects to a unix socket; the connection is closed at cleanup.
func dial(t testing.TB, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func pluginClient(t testing.TB, path string) pluginapi.DevicePluginClient {
	return pluginapi.NewDevicePluginClient(dial(t, path))
}

// fakeKubelet is a minimal Registration server on a kubelet.sock path. It records every
// Register request, can refuse with a scripted error and, like the real kubelet, can dial the
// plugin's socket back and call GetDevicePluginOptions before answering.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	path     string
	dialBack bool
	got      chan *pluginapi.RegisterRequest
	server   *grpc.Server
	wg       sync.WaitGroup
	stopOnce sync.Once

	mu  sync.Mutex
	err error
}

// startFakeKubelet serves a fake Registration service on path; it is stopped at cleanup.
// Stopping closes the listener, which deletes the socket file, as a kubelet going away does.
func startFakeKubelet(t testing.TB, path string, dialBack bool) *fakeKubelet {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("fake kubelet listen: %v", err)
	}
	k := &fakeKubelet{path: path, dialBack: dialBack, got: make(chan *pluginapi.RegisterRequest, 100), server: grpc.NewServer()}
	pluginapi.RegisterRegistrationServer(k.server, k)
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		_ = k.server.Serve(l)
	}()
	t.Cleanup(k.stop)
	return k
}

func (k *fakeKubelet) stop() {
	k.stopOnce.Do(func() {
		k.server.Stop()
		k.wg.Wait()
	})
}

func (k *fakeKubelet) setErr(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.err = err
}

func (k *fakeKubelet) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.got <- req
	k.mu.Lock()
	err := k.err
	k.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if k.dialBack {
		conn, err := grpc.NewClient("unix://"+filepath.Join(filepath.Dir(k.path), req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("failed to dial device plugin: %v", err)
		}
		defer func() { _ = conn.Close() }()
		// No wait-for-ready: the plugin's socket must already be served when it registers.
		if _, err := pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
			return nil, fmt.Errorf("failed to get device plugin options: %v", err)
		}
	}
	return &pluginapi.Empty{}, nil
}

// next returns the next Register request received, or fails the test after waitTimeout.
func (k *fakeKubelet) next(t testing.TB) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case req := <-k.got:
		return req
	case <-time.After(waitTimeout):
		t.Fatalf("no Register call on %s within %v", k.path, waitTimeout)
		return nil
	}
}

// recv receives one ListAndWatch message and returns its device IDs with health, e.g.
// ["a=Healthy", "b=Unhealthy"].
func recv(t testing.TB, s pluginapi.DevicePlugin_ListAndWatchClient) []string {
	t.Helper()
	msg, err := s.Recv()
	if err != nil {
		t.Fatalf("ListAndWatch Recv: %v", err)
	}
	out := make([]string, len(msg.Devices))
	for i, d := range msg.Devices {
		out[i] = d.ID + "=" + d.Health
	}
	return out
}

// Package plugintesting holds what the tests of package deviceplugin and of its test double
// (deviceplugin/plugintest) share: short socket directories, a fake kubelet Registration
// service and small client helpers. It imports neither package.
package plugintesting

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/sockdir"
)

// WaitTimeout bounds every wait for an event; it is a safety net, never the expected path.
const WaitTimeout = 10 * time.Second

// ShortDir is a fresh directory with a short path for unix sockets, removed at cleanup.
var ShortDir = sockdir.New

// Devices returns one device per ID, each with this health.
func Devices(health string, ids ...string) []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(ids))
	for i, id := range ids {
		out[i] = &pluginapi.Device{ID: id, Health: health}
	}
	return out
}

// WaitCtx is a context bounded by WaitTimeout, cancelled at cleanup.
func WaitCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// Dial connects to a unix socket; the connection is closed at cleanup.
func Dial(t testing.TB, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// PluginClient is a DevicePlugin client on the unix socket at path.
func PluginClient(t testing.TB, path string) pluginapi.DevicePluginClient {
	return pluginapi.NewDevicePluginClient(Dial(t, path))
}

// FakeKubelet is a minimal Registration server on a kubelet.sock path. It records every
// Register request, can refuse with a scripted error and, like the real kubelet, can dial the
// plugin's socket back and call GetDevicePluginOptions before answering.
type FakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	Path     string                          // the socket served
	Got      chan *pluginapi.RegisterRequest // every Register request, in order
	dialBack bool
	server   *grpc.Server
	wg       sync.WaitGroup
	stopOnce sync.Once

	mu  sync.Mutex
	err error
}

// StartFakeKubelet serves a fake Registration service on path; it is stopped at cleanup.
// Stopping closes the listener, which deletes the socket file, as a kubelet going away does.
func StartFakeKubelet(t testing.TB, path string, dialBack bool) *FakeKubelet {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("fake kubelet listen: %v", err)
	}
	k := &FakeKubelet{Path: path, dialBack: dialBack, Got: make(chan *pluginapi.RegisterRequest, 100), server: grpc.NewServer()}
	pluginapi.RegisterRegistrationServer(k.server, k)
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		_ = k.server.Serve(l)
	}()
	t.Cleanup(k.Stop)
	return k
}

// Stop stops serving and waits for the server to end. It is idempotent.
func (k *FakeKubelet) Stop() {
	k.stopOnce.Do(func() {
		k.server.Stop()
		k.wg.Wait()
	})
}

// SetErr makes every later Register fail with err (nil: succeed).
func (k *FakeKubelet) SetErr(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.err = err
}

// Register records req and answers it, first dialing the plugin back if asked to.
func (k *FakeKubelet) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.Got <- req
	k.mu.Lock()
	err := k.err
	k.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if k.dialBack {
		conn, err := grpc.NewClient("unix://"+filepath.Join(filepath.Dir(k.Path), req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
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

// Next returns the next Register request received, or fails the test after WaitTimeout.
func (k *FakeKubelet) Next(t testing.TB) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case req := <-k.Got:
		return req
	case <-time.After(WaitTimeout):
		t.Fatalf("no Register call on %s within %v", k.Path, WaitTimeout)
		return nil
	}
}

// Recv receives one ListAndWatch message and returns its device IDs with health, e.g.
// ["a=Healthy", "b=Unhealthy"].
func Recv(t testing.TB, s pluginapi.DevicePlugin_ListAndWatchClient) []string {
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

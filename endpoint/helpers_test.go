package endpoint

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/sockdir"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLimit bounds every wait on an event in these tests; reaching it is a failure, not a
// synchronisation point.
const waitLimit = 20 * time.Second

// socketDir returns a short temporary directory for unix sockets.
var socketDir = sockdir.New

// stubPlugin is a minimal DevicePluginServer. Unset hooks give simple defaults: the options
// as set, ListAndWatch streaming whatever is sent on updates until it is closed, and empty
// responses. Every request is recorded.
type stubPlugin struct {
	pluginapi.UnimplementedDevicePluginServer

	opts         *pluginapi.DevicePluginOptions
	updates      chan *pluginapi.ListAndWatchResponse
	onOptions    func(ctx context.Context) error
	onAllocate   func(ctx context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error)
	onPreferred  func(ctx context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error)
	onPreStart   func(ctx context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error)
	listAndWatch func(stream pluginapi.DevicePlugin_ListAndWatchServer) error

	mu       sync.Mutex
	requests []any
}

func newStubPlugin() *stubPlugin {
	return &stubPlugin{
		opts:    &pluginapi.DevicePluginOptions{},
		updates: make(chan *pluginapi.ListAndWatchResponse),
	}
}

func (p *stubPlugin) record(r any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = append(p.requests, r)
}

func (p *stubPlugin) recorded() []any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]any(nil), p.requests...)
}

func (p *stubPlugin) GetDevicePluginOptions(ctx context.Context, _ *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	if p.onOptions != nil {
		if err := p.onOptions(ctx); err != nil {
			return nil, err
		}
	}
	return p.opts, nil
}

func (p *stubPlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if p.listAndWatch != nil {
		return p.listAndWatch(s)
	}
	for {
		select {
		case <-s.Context().Done():
			return s.Context().Err()
		case u, ok := <-p.updates:
			if !ok {
				return nil
			}
			if err := s.Send(u); err != nil {
				return err
			}
		}
	}
}

func (p *stubPlugin) Allocate(ctx context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.record(r)
	if p.onAllocate != nil {
		return p.onAllocate(ctx, r)
	}
	return &pluginapi.AllocateResponse{}, nil
}

func (p *stubPlugin) GetPreferredAllocation(ctx context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p.record(r)
	if p.onPreferred != nil {
		return p.onPreferred(ctx, r)
	}
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *stubPlugin) PreStartContainer(ctx context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.record(r)
	if p.onPreStart != nil {
		return p.onPreStart(ctx, r)
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve starts p on a fresh unix socket and returns its path. The server is stopped, and its
// goroutine joined, at cleanup.
func serve(t testing.TB, p *stubPlugin) string {
	t.Helper()
	path := filepath.Join(socketDir(t), "p.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return path
}

// dialStub serves p and dials it with cfg; the endpoint is stopped at cleanup.
func dialStub(t testing.TB, p *stubPlugin, cfg Config) *Endpoint {
	t.Helper()
	path := serve(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	e, err := Dial(ctx, "example.com/dev", path, cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(e.Stop)
	return e
}

// blockUntilDone is a handler hook that hangs until the call's context ends.
func blockUntilDone(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// runResult is what a Run started in the background returned.
type runResult struct{ err error }

// startRun runs e.Run in a goroutine, forwarding every callback's devices to the returned
// channel. The goroutine is joined at cleanup (after the endpoint is stopped).
func startRun(t *testing.T, ctx context.Context, e *Endpoint) (<-chan []*pluginapi.Device, <-chan runResult) {
	t.Helper()
	lists := make(chan []*pluginapi.Device, 16)
	res := make(chan runResult, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res <- runResult{e.Run(ctx, func(d []*pluginapi.Device) { lists <- d })}
	}()
	t.Cleanup(func() {
		e.Stop()
		wg.Wait()
	})
	return lists, res
}

func nextList(t *testing.T, lists <-chan []*pluginapi.Device) []*pluginapi.Device {
	t.Helper()
	select {
	case d := <-lists:
		return d
	case <-time.After(waitLimit):
		t.Fatal("no ListAndWatch message delivered")
		return nil
	}
}

func runReturned(t *testing.T, res <-chan runResult) error {
	t.Helper()
	select {
	case r := <-res:
		return r.err
	case <-time.After(waitLimit):
		t.Fatal("Run did not return")
		return nil
	}
}

func send(t *testing.T, p *stubPlugin, devs ...*pluginapi.Device) {
	t.Helper()
	select {
	case p.updates <- &pluginapi.ListAndWatchResponse{Devices: devs}:
	case <-time.After(waitLimit):
		t.Fatal("plugin stream not consuming updates")
	}
}

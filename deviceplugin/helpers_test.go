package deviceplugin

import (
	"context"
	"fmt"
	"path"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"k8s.io/klog/v2/ktesting"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/kdm-project/kdm/deviceplugin/internal/plugintesting"
)

// waitTimeout bounds every wait for an event; it is a safety net, never the expected path.
const waitTimeout = plugintesting.WaitTimeout

const gpu = "example.com/gpu"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The helpers shared with the test double's tests.
var (
	shortDir         = plugintesting.ShortDir
	devices          = plugintesting.Devices
	waitCtx          = plugintesting.WaitCtx
	dial             = plugintesting.Dial
	pluginClient     = plugintesting.PluginClient
	startFakeKubelet = plugintesting.StartFakeKubelet
	recv             = plugintesting.Recv
)

type fakeKubelet = plugintesting.FakeKubelet

// observedPlugin is a Plugin whose calls, streams and registrations the test can count and
// wait for, through the Config's interceptors (the SDK's tests cannot use plugintest, which
// imports this package).
type observedPlugin struct {
	*Plugin
	obs *observer
}

// observer counts RPCs by method name ("GetDevicePluginOptions", "GetInfo", "ListAndWatch")
// and successful registrations ("registered").
type observer struct {
	mu      sync.Mutex
	counts  map[string]int
	changed chan struct{} // closed and replaced on every count
}

func (o *observer) add(what string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counts[what]++
	close(o.changed)
	o.changed = make(chan struct{})
}

func (o *observer) count(what string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[what]
}

// wait blocks until what was counted n times, ctx ends, or the plugin stops.
func (o *observer) wait(ctx context.Context, done <-chan struct{}, what string, n int) error {
	for {
		o.mu.Lock()
		got, changed := o.counts[what], o.changed
		o.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-done:
			return fmt.Errorf("waiting for %d %s: %w", n, what, ErrStopped)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d %s: %w", n, what, ctx.Err())
		}
	}
}

// observe installs o's interceptors in cfg.
func (o *observer) observe(cfg *Config) {
	cfg.UnaryInterceptor = func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		o.add(path.Base(info.FullMethod))
		resp, err := handler(ctx, req)
		if st, ok := req.(*registerapi.RegistrationStatus); ok && err == nil && st.GetPluginRegistered() {
			o.add("registered")
		}
		return resp, err
	}
	cfg.StreamInterceptor = func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		o.add(path.Base(info.FullMethod))
		return handler(srv, ss)
	}
	cfg.RegisterInterceptor = func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil {
			o.add("registered")
		}
		return err
	}
}

// WaitForRegistrations waits for n successful registrations.
func (p *observedPlugin) WaitForRegistrations(ctx context.Context, n int) error {
	return p.obs.wait(ctx, p.Done(), "registered", n)
}

// WaitForStreams waits for n ListAndWatch streams opened in total.
func (p *observedPlugin) WaitForStreams(ctx context.Context, n int) error {
	return p.obs.wait(ctx, p.Done(), "ListAndWatch", n)
}

// newPlugin builds an observed plugin with a test logger and stops it at cleanup (not
// started).
func newPlugin(t testing.TB, cfg Config) *observedPlugin {
	t.Helper()
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4)))
	}
	o := &observer{counts: map[string]int{}, changed: make(chan struct{})}
	o.observe(&cfg)
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(p.Stop)
	return &observedPlugin{Plugin: p, obs: o}
}

// startPlugin is newPlugin plus a successful Start.
func startPlugin(t testing.TB, cfg Config) *observedPlugin {
	t.Helper()
	p := newPlugin(t, cfg)
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return p
}

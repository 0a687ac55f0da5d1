package plugintest

import (
	"context"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/klog/v2/ktesting"

	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/internal/plugintesting"
)

// waitTimeout bounds every wait for an event; it is a safety net, never the expected path.
const waitTimeout = plugintesting.WaitTimeout

const gpu = "example.com/gpu"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The helpers shared with the SDK's tests.
var (
	shortDir         = plugintesting.ShortDir
	devices          = plugintesting.Devices
	waitCtx          = plugintesting.WaitCtx
	pluginClient     = plugintesting.PluginClient
	startFakeKubelet = plugintesting.StartFakeKubelet
	recv             = plugintesting.Recv
)

// newPlugin builds a double with a test logger and stops it at cleanup (not started).
func newPlugin(t testing.TB, cfg deviceplugin.Config, opts ...Option) *Plugin {
	t.Helper()
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4)))
	}
	p, err := New(cfg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

// startPlugin is newPlugin plus a successful Start.
func startPlugin(t testing.TB, cfg deviceplugin.Config, opts ...Option) *Plugin {
	t.Helper()
	p := newPlugin(t, cfg, opts...)
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return p
}

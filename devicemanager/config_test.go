package devicemanager

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/endpoint"
)

// TestConfigValidate covers every rejection of Config.Validate with its message, one row per
// branch, and checks that several errors come back in field order.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // nil for a valid config
	}{
		{name: "zero", cfg: Config{}},
		{name: "absolute dirs, kdm policy", cfg: Config{PluginDir: "/var/lib/kubelet/device-plugins",
			PluginWatcherDir: "/var/lib/kubelet/plugins_registry", GracePeriod: time.Minute, Policy: KDMPolicy()}},
		{name: "relative PluginDir", cfg: Config{PluginDir: "relative/dir"},
			want: []string{"bad socketPath, must be an absolute path: relative/dir/kubelet.sock"}},
		{name: "relative PluginWatcherDir", cfg: Config{PluginWatcherDir: "plugins_registry"},
			want: []string{"plugin watcher dir must be an absolute path: plugins_registry"}},
		{name: "negative GracePeriod", cfg: Config{GracePeriod: -time.Second},
			want: []string{"grace period must not be negative: -1s"}},
		{name: "negative endpoint timeout", cfg: Config{Endpoint: endpoint.Config{DialTimeout: -time.Second}},
			want: []string{"endpoint: DialTimeout must not be negative, got -1s"}},
		{name: "negative endpoint message size", cfg: Config{Endpoint: endpoint.Config{MaxRecvMsgSize: -1}},
			want: []string{"endpoint: MaxRecvMsgSize must not be negative, got -1"}},
		{name: "endpoint clock set", cfg: Config{Endpoint: endpoint.Config{Clock: clock.RealClock{}}},
			want: []string{"endpoint clock must be nil: endpoints use the manager's Clock"}},
		{name: "endpoint RPC deadline set", cfg: Config{Endpoint: endpoint.Config{PreferredAllocationTimeout: time.Second}},
			want: []string{"endpoint AllocateTimeout and PreferredAllocationTimeout must be zero: set Policy.AllocateTimeout and Policy.PreferredAllocationTimeout"}},
		{name: "negative DeferAdmissionTimeout", cfg: Config{Policy: Policy{DeferAdmission: true, DeferAdmissionTimeout: -time.Second}},
			want: []string{"defer admission timeout must not be negative: -1s"}},
		{name: "negative policy AllocateTimeout", cfg: Config{Policy: Policy{AllocateTimeout: -time.Second}},
			want: []string{"allocate timeout must not be negative: -1s"}},
		{name: "negative policy PreferredAllocationTimeout", cfg: Config{Policy: Policy{PreferredAllocationTimeout: -time.Second}},
			want: []string{"preferred allocation timeout must not be negative: -1s"}},
		{name: "everything, in field order", cfg: Config{
			Policy:           Policy{PreferredAllocationTimeout: -3, AllocateTimeout: -2, DeferAdmissionTimeout: -1},
			Endpoint:         endpoint.Config{Clock: clock.RealClock{}, MaxRecvMsgSize: -5, AllocateTimeout: -4},
			GracePeriod:      -time.Minute,
			PluginWatcherDir: "w",
			PluginDir:        "p",
		}, want: []string{
			"bad socketPath, must be an absolute path: p/kubelet.sock",
			"plugin watcher dir must be an absolute path: w",
			"grace period must not be negative: -1m0s",
			"endpoint: AllocateTimeout must not be negative, got -4ns",
			"endpoint: MaxRecvMsgSize must not be negative, got -5",
			"endpoint clock must be nil: endpoints use the manager's Clock",
			"endpoint AllocateTimeout and PreferredAllocationTimeout must be zero: set Policy.AllocateTimeout and Policy.PreferredAllocationTimeout",
			"defer admission timeout must not be negative: -1ns",
			"allocate timeout must not be negative: -2ns",
			"preferred allocation timeout must not be negative: -3ns",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				if _, err := New(tc.cfg); err != nil {
					t.Fatalf("New() = %v, want a manager", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() accepted %+v", tc.cfg)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("Validate() errors\n%q\nwant\n%q", got, tc.want)
			}
			if m, nerr := New(tc.cfg); nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New() = %v, %v; want Validate's error", m, nerr)
			}
		})
	}
}

// TestConfigDefaults checks each documented zero value, and that values that are set are kept.
func TestConfigDefaults(t *testing.T) {
	d := Config{Policy: Policy{DeferAdmission: true}}.withDefaults()
	if d.PluginDir != pluginapi.DevicePluginPath {
		t.Errorf("PluginDir = %q, want %q", d.PluginDir, pluginapi.DevicePluginPath)
	}
	if d.GracePeriod != DefaultGracePeriod {
		t.Errorf("GracePeriod = %v, want %v", d.GracePeriod, DefaultGracePeriod)
	}
	if _, ok := d.Clock.(clock.RealClock); !ok {
		t.Errorf("Clock = %T, want clock.RealClock", d.Clock)
	}
	if d.Logger.GetSink() == nil {
		t.Error("Logger not defaulted")
	}
	if d.QuarantineCorruptCheckpoint == nil || !*d.QuarantineCorruptCheckpoint {
		t.Errorf("QuarantineCorruptCheckpoint = %v, want true", d.QuarantineCorruptCheckpoint)
	}
	if d.Policy.DeferAdmissionTimeout != DefaultDeferAdmissionTimeout {
		t.Errorf("DeferAdmissionTimeout = %v, want %v", d.Policy.DeferAdmissionTimeout, DefaultDeferAdmissionTimeout)
	}
	if d.Endpoint.Clock != d.Clock || d.Endpoint.DialTimeout != endpoint.DefaultDialTimeout {
		t.Errorf("Endpoint = %+v, want the manager's clock and endpoint defaults", d.Endpoint)
	}
	if off := (Config{}).withDefaults(); off.Policy.DeferAdmissionTimeout != 0 {
		t.Errorf("DeferAdmissionTimeout without DeferAdmission = %v, want 0", off.Policy.DeferAdmissionTimeout)
	}

	fake := clocktesting.NewFakeClock(time.Unix(0, 0))
	quarantine := false
	epLog := testr.New(t).WithName("endpoints")
	set := Config{
		PluginDir: "/run/kdm", GracePeriod: time.Second, Clock: fake, QuarantineCorruptCheckpoint: &quarantine,
		Policy:   Policy{DeferAdmission: true, DeferAdmissionTimeout: time.Second},
		Endpoint: endpoint.Config{DialTimeout: time.Second, Logger: epLog},
	}
	got := set.withDefaults()
	if got.PluginDir != set.PluginDir || got.GracePeriod != set.GracePeriod || got.Clock != fake ||
		*got.QuarantineCorruptCheckpoint || got.Policy.DeferAdmissionTimeout != time.Second {
		t.Errorf("withDefaults changed set fields: %+v", got)
	}
	if got.Endpoint.Clock != fake || got.Endpoint.DialTimeout != time.Second || got.Endpoint.Logger != epLog {
		t.Errorf("Endpoint = %+v, want the manager's fake clock, DialTimeout 1s and its own logger", got.Endpoint)
	}
}

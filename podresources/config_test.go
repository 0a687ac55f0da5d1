package podresources

import (
	"math"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// TestServerConfigValidate covers every rejection of ServerConfig.Validate with its message,
// and checks that NewServer refuses the same configs with the same error.
func TestServerConfigValidate(t *testing.T) {
	providers := Providers{Pods: &fakePods{}, Devices: &fakeDevices{}}
	for _, tc := range []struct {
		name string
		cfg  ServerConfig
		want string // "" for a valid config
	}{
		{"providers only", ServerConfig{Providers: providers}, ""},
		{"limit disabled, no graceful stop", ServerConfig{Providers: providers, QPS: -1, GracefulStopTimeout: -1}, ""},
		{"unbounded QPS", ServerConfig{Providers: providers, QPS: math.Inf(1), Burst: 1}, ""},
		{"no PodsProvider", ServerConfig{Providers: Providers{Devices: &fakeDevices{}}},
			"podresources: a PodsProvider is required"},
		{"no DevicesProvider", ServerConfig{Providers: Providers{Pods: &fakePods{}}},
			"podresources: a DevicesProvider is required"},
		{"NaN QPS", ServerConfig{Providers: providers, QPS: math.NaN()},
			"podresources: QPS must be a number, got NaN"},
		{"negative Burst", ServerConfig{Providers: providers, Burst: -1},
			"podresources: Burst must not be negative, got -1"},
		{"everything, in field order", ServerConfig{Burst: -2, QPS: math.NaN()},
			"podresources: a PodsProvider is required\n" +
				"podresources: a DevicesProvider is required\n" +
				"podresources: QPS must be a number, got NaN\n" +
				"podresources: Burst must not be negative, got -2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			srv, nerr := NewServer(tc.cfg)
			if tc.want == "" {
				if err != nil || nerr != nil {
					t.Fatalf("Validate() = %v, NewServer() = %v; want both nil", err, nerr)
				}
				srv.grpc.Stop()
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
			if nerr == nil || nerr.Error() != tc.want {
				t.Errorf("NewServer() = %v, %v; want error %q", srv, nerr, tc.want)
			}
		})
	}
}

// TestServerConfigDefaults checks each documented zero value, and that set values are kept.
func TestServerConfigDefaults(t *testing.T) {
	d := ServerConfig{}.withDefaults()
	if d.QPS != DefaultQPS || d.Burst != DefaultBurst || d.GracefulStopTimeout != DefaultGracefulStopTimeout {
		t.Errorf("defaults QPS %v, Burst %d, GracefulStopTimeout %v; want %v, %d, %v",
			d.QPS, d.Burst, d.GracefulStopTimeout, DefaultQPS, DefaultBurst, DefaultGracefulStopTimeout)
	}
	if d.Logger.GetSink() == nil {
		t.Error("Logger not defaulted")
	}
	log := klog.LoggerWithName(klog.Background(), "mine")
	set := ServerConfig{QPS: -1, Burst: 3, GracefulStopTimeout: -time.Second, Logger: log}
	if got := set.withDefaults(); got.QPS != -1 || got.Burst != 3 || got.GracefulStopTimeout != -time.Second || got.Logger != log {
		t.Errorf("withDefaults changed set fields: %+v", got)
	}
}

package endpoint

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/internal/configtest"
)

func TestConfigWithDefaults(t *testing.T) {
	d := Config{}.WithDefaults()
	if d.DialTimeout != 10*time.Second || d.OptionsTimeout != 10*time.Second || d.PreStartTimeout != 30*time.Second {
		t.Errorf("timeouts = %v/%v/%v, want 10s/10s/30s", d.DialTimeout, d.OptionsTimeout, d.PreStartTimeout)
	}
	if d.AllocateTimeout != 0 || d.PreferredAllocationTimeout != 0 {
		t.Errorf("Allocate/GetPreferredAllocation timeouts = %v/%v, want 0 (kubelet: none)", d.AllocateTimeout, d.PreferredAllocationTimeout)
	}
	if d.MaxRecvMsgSize != 64<<20 {
		t.Errorf("MaxRecvMsgSize = %d, want 64 MiB", d.MaxRecvMsgSize)
	}
	if _, ok := d.Clock.(clock.RealClock); !ok {
		t.Errorf("Clock = %T, want clock.RealClock", d.Clock)
	}
	if d.Logger.GetSink() == nil {
		t.Error("Logger not defaulted")
	}

	fake := clocktesting.NewFakeClock(time.Time{})
	set := Config{
		DialTimeout: time.Second, OptionsTimeout: 2 * time.Second, AllocateTimeout: 3 * time.Second,
		PreferredAllocationTimeout: 4 * time.Second, PreStartTimeout: 5 * time.Second,
		MaxRecvMsgSize: 1 << 10, Clock: fake,
	}
	got := set.WithDefaults()
	got.Logger = set.Logger
	if got != set {
		t.Errorf("WithDefaults changed set fields: %+v", got)
	}

	neg := Config{DialTimeout: -1, MaxRecvMsgSize: -1}
	if got := neg.WithDefaults(); got.DialTimeout != -1 || got.MaxRecvMsgSize != -1 {
		t.Errorf("WithDefaults changed invalid values: %+v", got)
	}
	if again := d.WithDefaults(); again.DialTimeout != d.DialTimeout || again.MaxRecvMsgSize != d.MaxRecvMsgSize {
		t.Error("WithDefaults is not idempotent")
	}
}

// TestConfigValidate lists every value Config.Validate refuses, with the exact message, and
// checks that the zero value and the documented defaults are accepted.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" for a valid config
	}{
		{"zero", Config{}, ""},
		{"defaults", Config{}.WithDefaults(), ""},
		{"recommended deadlines", Config{AllocateTimeout: RecommendedAllocateTimeout,
			PreferredAllocationTimeout: RecommendedPreferredAllocationTimeout}, ""},
		{"DialTimeout", Config{DialTimeout: -time.Second},
			"endpoint: DialTimeout must not be negative, got -1s"},
		{"OptionsTimeout", Config{OptionsTimeout: -time.Millisecond},
			"endpoint: OptionsTimeout must not be negative, got -1ms"},
		{"AllocateTimeout", Config{AllocateTimeout: -time.Second},
			"endpoint: AllocateTimeout must not be negative, got -1s"},
		{"PreferredAllocationTimeout", Config{PreferredAllocationTimeout: -time.Minute},
			"endpoint: PreferredAllocationTimeout must not be negative, got -1m0s"},
		{"PreStartTimeout", Config{PreStartTimeout: -1},
			"endpoint: PreStartTimeout must not be negative, got -1ns"},
		{"MaxRecvMsgSize", Config{MaxRecvMsgSize: -1},
			"endpoint: MaxRecvMsgSize must not be negative, got -1"},
		{"all, in field order", Config{MaxRecvMsgSize: -2, PreStartTimeout: -2 * time.Second,
			PreferredAllocationTimeout: -2 * time.Second, AllocateTimeout: -2 * time.Second,
			OptionsTimeout: -2 * time.Second, DialTimeout: -2 * time.Second},
			"endpoint: DialTimeout must not be negative, got -2s\n" +
				"endpoint: OptionsTimeout must not be negative, got -2s\n" +
				"endpoint: AllocateTimeout must not be negative, got -2s\n" +
				"endpoint: PreferredAllocationTimeout must not be negative, got -2s\n" +
				"endpoint: PreStartTimeout must not be negative, got -2s\n" +
				"endpoint: MaxRecvMsgSize must not be negative, got -2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			configtest.CheckError(t, tc.cfg.Validate(), tc.want)
		})
	}
}

// TestDialRejectsInvalidConfig checks that Dial reports Validate's error before it touches
// the socket, and that NewStopped, which uses only the clock and the logger, still succeeds.
func TestDialRejectsInvalidConfig(t *testing.T) {
	cfg := Config{AllocateTimeout: -time.Second}
	ep, err := Dial(context.Background(), "example.com/gpu", filepath.Join(t.TempDir(), "missing.sock"), cfg)
	if want := "endpoint: AllocateTimeout must not be negative, got -1s"; err == nil || err.Error() != want {
		t.Fatalf("Dial() = %v, %v; want error %q", ep, err, want)
	}

	fake := clocktesting.NewFakeClock(time.Unix(100, 0))
	cfg.Clock = fake
	stopped := NewStopped("example.com/gpu", cfg)
	if !stopped.IsStopped() || !stopped.StopTime().Equal(fake.Now()) {
		t.Errorf("NewStopped: stopped=%v at %v, want stopped at %v", stopped.IsStopped(), stopped.StopTime(), fake.Now())
	}
}

package endpoint

import (
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
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

	neg := Config{DialTimeout: -1, OptionsTimeout: -1, AllocateTimeout: -1, PreferredAllocationTimeout: -1,
		PreStartTimeout: -1, MaxRecvMsgSize: -1}.WithDefaults()
	if neg.DialTimeout != DefaultDialTimeout || neg.OptionsTimeout != DefaultOptionsTimeout ||
		neg.PreStartTimeout != DefaultPreStartTimeout || neg.MaxRecvMsgSize != DefaultMaxRecvMsgSize ||
		neg.AllocateTimeout != 0 || neg.PreferredAllocationTimeout != 0 {
		t.Errorf("negative values not normalised: %+v", neg)
	}
	if again := d.WithDefaults(); again.DialTimeout != d.DialTimeout || again.MaxRecvMsgSize != d.MaxRecvMsgSize {
		t.Error("WithDefaults is not idempotent")
	}
}

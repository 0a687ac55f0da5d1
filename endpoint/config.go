package endpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"
)

// Defaults applied by [Config.WithDefaults].
const (
	// DefaultDialTimeout is the kubelet's dial timeout for a device plugin socket.
	DefaultDialTimeout = 10 * time.Second
	// DefaultOptionsTimeout bounds GetDevicePluginOptions. The kubelet has no bound there, so a
	// plugin that accepts the connection but never answers blocks its Register call forever.
	DefaultOptionsTimeout = 10 * time.Second
	// DefaultPreStartTimeout is the kubelet's KubeletPreStartContainerRPCTimeoutInSecs.
	DefaultPreStartTimeout = pluginapi.KubeletPreStartContainerRPCTimeoutInSecs * time.Second
	// DefaultMaxRecvMsgSize is large enough for one ListAndWatch message describing 100,000
	// devices; gRPC's 4 MiB default overflows somewhere near 68,000.
	DefaultMaxRecvMsgSize = 64 << 20

	// RecommendedAllocateTimeout is the bound we suggest for Config.AllocateTimeout. It is not
	// applied by default, because the kubelet applies none.
	RecommendedAllocateTimeout = 30 * time.Second
	// RecommendedPreferredAllocationTimeout is the bound we suggest for
	// Config.PreferredAllocationTimeout. It is not applied by default (kubelet parity).
	RecommendedPreferredAllocationTimeout = 10 * time.Second
)

// Config holds the dial and RPC settings of an [Endpoint]. Every field's zero value means the
// default documented on it; a negative duration or size is invalid (see [Config.Validate]),
// never quietly replaced. Dial validates the Config and then applies [Config.WithDefaults].
//
// Timeouts are real time: they become gRPC deadlines, which the Clock does not drive. The
// Clock only stamps and ages the stop time (StopTime, GracePeriodExpired).
type Config struct {
	// DialTimeout bounds connecting to the plugin socket. Zero means DefaultDialTimeout (10s,
	// as the kubelet).
	DialTimeout time.Duration
	// OptionsTimeout bounds the GetDevicePluginOptions call made by Dial. Zero means
	// DefaultOptionsTimeout (10s). The kubelet has no bound here.
	OptionsTimeout time.Duration
	// AllocateTimeout bounds each Allocate RPC. Zero means no deadline beyond the caller's
	// context, as in the kubelet; RecommendedAllocateTimeout (30s) is a sensible bound.
	AllocateTimeout time.Duration
	// PreferredAllocationTimeout bounds each GetPreferredAllocation RPC. Zero means no
	// deadline (kubelet parity); RecommendedPreferredAllocationTimeout (10s) is suggested.
	PreferredAllocationTimeout time.Duration
	// PreStartTimeout bounds each PreStartContainer RPC. Zero means DefaultPreStartTimeout
	// (30s, as the kubelet).
	PreStartTimeout time.Duration
	// MaxRecvMsgSize is the largest message, in bytes, the client accepts from the plugin.
	// Zero means DefaultMaxRecvMsgSize (64 MiB).
	MaxRecvMsgSize int
	// Clock stamps the stop time and measures the grace period. Nil means clock.RealClock{}.
	Clock clock.Clock
	// Logger receives the endpoint's logs; "resourceName" and "endpoint" are added to it.
	// The zero Logger means klog.Background().
	Logger klog.Logger
}

// Validate reports every negative duration or size in c, naming the field and its value, as
// in "endpoint: AllocateTimeout must not be negative, got -1s". The errors are joined with
// errors.Join in the order the fields are declared. Validate changes nothing; zero values
// are valid.
func (c Config) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"DialTimeout", c.DialTimeout},
		{"OptionsTimeout", c.OptionsTimeout},
		{"AllocateTimeout", c.AllocateTimeout},
		{"PreferredAllocationTimeout", c.PreferredAllocationTimeout},
		{"PreStartTimeout", c.PreStartTimeout},
	} {
		if f.d < 0 {
			errs = append(errs, fmt.Errorf("endpoint: %s must not be negative, got %v", f.name, f.d))
		}
	}
	if c.MaxRecvMsgSize < 0 {
		errs = append(errs, fmt.Errorf("endpoint: MaxRecvMsgSize must not be negative, got %d", c.MaxRecvMsgSize))
	}
	return errors.Join(errs...)
}

// WithDefaults returns a copy of c with every zero field that has a default filled in. Fields
// where zero means "no deadline" (AllocateTimeout, PreferredAllocationTimeout) and fields
// already set are left as they are, so invalid values stay invalid: call Validate first. It
// is idempotent.
func (c Config) WithDefaults() Config {
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.OptionsTimeout == 0 {
		c.OptionsTimeout = DefaultOptionsTimeout
	}
	if c.PreStartTimeout == 0 {
		c.PreStartTimeout = DefaultPreStartTimeout
	}
	if c.MaxRecvMsgSize == 0 {
		c.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	return c
}

// withTimeout derives a context with deadline d from ctx, or just a cancelable ctx when d is
// not positive (no deadline of our own).
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

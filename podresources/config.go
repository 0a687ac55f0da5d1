package podresources

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// The kubelet's rate limit for the podresources endpoint.
const (
	DefaultQPS   = 100
	DefaultBurst = 10
)

// DefaultGracefulStopTimeout is how long Serve waits for calls in progress when it stops, unless
// ServerConfig.GracefulStopTimeout says otherwise.
const DefaultGracefulStopTimeout = 5 * time.Second

// ServerConfig describes a Server. Every field's zero value means the default documented on it,
// except Providers, whose Pods and Devices must be set. NewServer rejects invalid values with
// Validate's error instead of correcting them.
type ServerConfig struct {
	// Providers answer the calls. Pods and Devices are required; CPUs, Memory and Dynamic may
	// be nil, which reports no such resources.
	Providers Providers
	// QPS and Burst size the token bucket shared by every method of both API versions.
	// Zero means the kubelet's defaults (DefaultQPS 100, DefaultBurst 10); a negative QPS
	// disables the limit. QPS must be a number (not NaN) and Burst must not be negative.
	QPS   float64
	Burst int
	// Registry receives the kubelet_pod_resources_endpoint_* counters; nil keeps them private.
	Registry prometheus.Registerer
	// Logger receives the server's logs, under the name "podresources". The zero Logger means
	// klog.Background().
	Logger klog.Logger
	// GracefulStopTimeout bounds the graceful part of Serve's shutdown: how long calls in
	// progress may take to finish, and their responses to be delivered, once Serve's context
	// has ended. Then every connection is closed hard. Zero means DefaultGracefulStopTimeout;
	// a negative value skips the graceful stop.
	GracefulStopTimeout time.Duration
}

// Validate reports every invalid value in c, joined with errors.Join in the order the fields
// are declared: a missing PodsProvider or DevicesProvider, a NaN QPS, a negative Burst. It
// changes nothing.
func (c ServerConfig) Validate() error {
	var errs []error
	if err := c.Providers.validate(); err != nil {
		errs = append(errs, err)
	}
	if math.IsNaN(c.QPS) {
		errs = append(errs, errors.New("podresources: QPS must be a number, got NaN"))
	}
	if c.Burst < 0 {
		errs = append(errs, fmt.Errorf("podresources: Burst must not be negative, got %d", c.Burst))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with each zero field set to its documented default.
func (c ServerConfig) withDefaults() ServerConfig {
	if c.QPS == 0 {
		c.QPS = DefaultQPS
	}
	if c.Burst == 0 {
		c.Burst = DefaultBurst
	}
	if c.GracefulStopTimeout == 0 {
		c.GracefulStopTimeout = DefaultGracefulStopTimeout
	}
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	return c
}

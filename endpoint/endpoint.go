package endpoint

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Endpoint is the manager's client for one registered device plugin instance: one gRPC
// connection to the plugin's socket, the options it announced, and a stopped/grace state.
//
// An Endpoint is safe for concurrent use. Its identity (resource name, socket path, options,
// connection) never changes after construction; only the stop state does, under its own
// mutex, which is never held across an RPC.
type Endpoint struct {
	resourceName string
	socketPath   string
	cfg          Config
	log          klog.Logger

	// Immutable after construction; all nil for a stopped placeholder.
	opts   *pluginapi.DevicePluginOptions
	conn   *grpc.ClientConn
	client pluginapi.DevicePluginClient

	closeOnce sync.Once // closes conn exactly once

	mu       sync.Mutex
	stopped  bool      // guarded by mu
	stopTime time.Time // guarded by mu; set once, when stopped becomes true
}

// Dial connects to the device plugin serving resourceName on socketPath and asks for its
// options, the way the kubelet does on registration.
//
// It blocks until the connection is ready, the DialTimeout passes or ctx ends, then calls
// GetDevicePluginOptions under OptionsTimeout. Errors are "failed to dial device plugin: …"
// and "failed to get device plugin options: …" (the kubelet's strings), wrapping the cause so
// that errors.Is(err, context.DeadlineExceeded) and status.Code work. A dial that times out
// reads exactly as the kubelet's, "failed to dial device plugin: context deadline exceeded"
// (the socket and the last connect error are logged). Beyond the kubelet, a socket path
// where no file exists, or whose file disappears while dialling, fails at once with
// "failed to dial device plugin: socket "<path>" does not exist", which wraps
// ErrSocketMissing. An invalid cfg fails before anything is dialled, with cfg.Validate's
// error. On error nothing is left open. The returned Endpoint is running; its ListAndWatch
// stream is started with Run.
func Dial(ctx context.Context, resourceName, socketPath string, cfg Config) (*Endpoint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	log := cfg.Logger.WithValues("resourceName", resourceName, "endpoint", socketPath)

	conn, err := dial(ctx, log, socketPath, cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to dial device plugin: %w", err)
	}
	client := pluginapi.NewDevicePluginClient(conn)

	octx, cancel := withTimeout(ctx, cfg.OptionsTimeout)
	opts, err := client.GetDevicePluginOptions(octx, &pluginapi.Empty{})
	ctxErr := octx.Err()
	cancel()
	if err != nil {
		closeConn(log, conn)
		if ctxErr != nil { // keep errors.Is(err, context.Canceled/DeadlineExceeded) true
			return nil, fmt.Errorf("failed to get device plugin options: %w (%w)", err, ctxErr)
		}
		return nil, fmt.Errorf("failed to get device plugin options: %w", err)
	}
	log.V(4).Info("Connected to device plugin",
		"preStartRequired", opts.GetPreStartRequired(),
		"getPreferredAllocationAvailable", opts.GetGetPreferredAllocationAvailable())
	return &Endpoint{
		resourceName: resourceName,
		socketPath:   socketPath,
		cfg:          cfg,
		log:          log,
		opts:         opts,
		conn:         conn,
		client:       client,
	}, nil
}

// NewStopped returns the placeholder the manager keeps for a resource restored from the
// checkpoint whose plugin has not re-registered yet (the kubelet's newStoppedEndpointImpl): no
// connection, Options nil, SocketPath empty, stopped at cfg.Clock.Now(). Every RPC and Run
// fail with ErrStopped. Only cfg.Clock and cfg.Logger are used, with their zero-value
// defaults: a stopped endpoint never dials nor calls, so the timeouts and the message size
// are dropped unchecked and NewStopped cannot fail.
func NewStopped(resourceName string, cfg Config) *Endpoint {
	cfg = Config{Clock: cfg.Clock, Logger: cfg.Logger}.WithDefaults()
	return &Endpoint{
		resourceName: resourceName,
		cfg:          cfg,
		log:          cfg.Logger.WithValues("resourceName", resourceName),
		stopped:      true,
		stopTime:     cfg.Clock.Now(),
	}
}

// ResourceName returns the extended resource name the plugin registered.
func (e *Endpoint) ResourceName() string { return e.resourceName }

// SocketPath returns the plugin socket the endpoint dialed ("" for a stopped placeholder).
func (e *Endpoint) SocketPath() string { return e.socketPath }

// Options returns what GetDevicePluginOptions answered at Dial time, or nil for a stopped
// placeholder. The value is shared: callers must not mutate it.
func (e *Endpoint) Options() *pluginapi.DevicePluginOptions { return e.opts }

// Stop marks the endpoint stopped at Clock.Now() and closes its gRPC connection, which ends a
// running Run and makes in-flight RPCs fail. Only the first call stamps the stop time. Stop is
// idempotent, safe to call concurrently with RPCs and with itself, and returns once the
// connection is closed.
func (e *Endpoint) Stop() {
	e.mu.Lock()
	if !e.stopped {
		e.stopped = true
		e.stopTime = e.cfg.Clock.Now()
	}
	e.mu.Unlock()
	e.closeOnce.Do(func() {
		if e.conn != nil {
			closeConn(e.log, e.conn)
		}
	})
}

// IsStopped reports whether Stop was called (always true for a placeholder).
func (e *Endpoint) IsStopped() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopped
}

// StopTime returns when the endpoint was stopped, or the zero time while it runs.
func (e *Endpoint) StopTime() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopTime
}

// GracePeriodExpired reports whether the endpoint is stopped and more than grace has passed
// since (Clock.Since(stopTime) > grace, strictly, as the kubelet). A running endpoint never
// expires.
func (e *Endpoint) GracePeriodExpired(grace time.Duration) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopped && e.cfg.Clock.Since(e.stopTime) > grace
}

func closeConn(log klog.Logger, conn *grpc.ClientConn) {
	if err := conn.Close(); err != nil {
		log.V(2).Info("Failed to close gRPC connection to device plugin", "err", err)
	}
}

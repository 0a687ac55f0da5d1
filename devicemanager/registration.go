package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/endpoint"
	"github.com/kdm-project/kdm/internal/state"
)

// supportedVersions are the device-plugin API versions the manager speaks.
var supportedVersions = []string{pluginapi.Version}

// registrationServer serves the Registration service on kubelet.sock. Besides the kubelet's
// checks it bounds the Register calls in flight, those waiting for their plugin's socket to
// answer (awaiting) apart from those dialling it (limiter), and rate-limits the log lines of
// repeated causes (logs), so that a flood of Registers costs neither memory nor log volume.
// newRegistrationServer sets the fields up.
type registrationServer struct {
	pluginapi.UnimplementedRegistrationServer
	m *Manager

	awaiting, limiter registerLimiter
	logs              logLimiter
}

func newRegistrationServer(m *Manager) *registrationServer {
	return &registrationServer{m: m, awaiting: registerLimiter{awaiting: true}}
}

// Register validates the request and connects to the plugin synchronously: the call returns
// only once the plugin has been dialled and its options read, and any failure goes back to
// the plugin. Options in the request are ignored; they come from GetDevicePluginOptions.
//
// Beyond the kubelet: the endpoint is resolved and must stay inside the plugin directory (see
// pluginSocketPath); a socket that serves another resource is refused (ErrSocketInUse); the
// call first waits, cheaply, for the plugin's socket to answer (endpoint.Probe), and only then
// dials it, so that registrants whose sockets never answer cannot hold the dials a live
// plugin needs; and a call beyond a bound of its stage (maxRegistersAwaitingAnswer while it
// waits for the answer, maxRegistersPerEndpoint and maxRegistersTotal while it dials) is
// served, while an older call of that stage (the oldest of the busiest registrant, see
// registerLimiter) is cancelled and fails with codes.ResourceExhausted
// (ErrRegistrationSuperseded). A socket that never answers fails after the dial timeout with
// the dial's error, as with the kubelet. Repeated log lines of one cause are written once per
// logRepeatInterval, with the number suppressed in between.
func (s *registrationServer) Register(ctx context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	m := s.m
	m.metrics.countRegistration(r.ResourceName)
	log := m.log.WithValues("resourceName", r.ResourceName, "endpoint", r.Endpoint)
	cause := r.ResourceName + "\x00" + r.Endpoint + "\x00"
	if r.Version != pluginapi.Version {
		err := fmt.Errorf("requested API version %q is not supported by kubelet. Supported version is %q", r.Version, supportedVersions)
		s.logError(log, cause+err.Error(), err, "Bad registration request from device plugin")
		return &pluginapi.Empty{}, err
	}
	if !isExtendedResourceName(r.ResourceName) {
		err := fmt.Errorf("the ResourceName %q is invalid", r.ResourceName)
		s.logError(log, cause+err.Error(), err, "Bad registration request from device plugin")
		return &pluginapi.Empty{}, err
	}
	if s.allowLog(cause + "request") {
		log.V(2).Info("Got registration request from device plugin")
	}
	path, err := pluginSocketPath(m.cfg.PluginDir, r.Endpoint)
	if err != nil {
		s.logError(log, cause+err.Error(), err, "Bad registration request from device plugin")
		return &pluginapi.Empty{}, err
	}
	err = m.mayConnect(r.ResourceName, path)
	if err == nil {
		err = s.awaitAnswer(ctx, r.ResourceName, r.Endpoint, path)
	}
	if err == nil {
		dctx, done := s.limiter.admit(ctx, r.ResourceName, r.Endpoint)
		defer done()
		_, err = m.connect(dctx, r.ResourceName, path, filepath.Join(m.cfg.PluginDir, r.Endpoint))
		if cause := superseded(dctx); err != nil && cause != nil {
			err = cause
		}
	}
	if err != nil {
		if errors.Is(err, ErrRegistrationSuperseded) {
			// One cause for every superseded call, whatever it names.
			s.logError(log, "\x00superseded", err, "Cancelled a registration request superseded by newer ones")
			return &pluginapi.Empty{}, err
		}
		key := cause + err.Error()
		var inUse *socketInUse
		if errors.As(err, &inUse) {
			// The cause is the socket's owner, not the (possibly ever-changing) name.
			key = "\x00inuse\x00" + inUse.socket + "\x00" + inUse.owner
		}
		s.logError(log, key, err, "Failed to connect to device plugin")
		return &pluginapi.Empty{}, registerStatus(err)
	}
	return &pluginapi.Empty{}, nil
}

// awaitAnswer waits, as one of the awaiting calls, until the plugin's socket at path answers
// (nil), or fails as the dial would: with the dial's error once the dial timeout passes or the
// socket is found missing, or with the limiter's *supersededError if newer calls took its
// place.
func (s *registrationServer) awaitAnswer(ctx context.Context, resource, endpointName, path string) error {
	actx, done := s.awaiting.admit(ctx, resource, endpointName)
	defer done()
	err := endpoint.Probe(actx, path, s.m.cfg.Endpoint)
	if cause := superseded(actx); err != nil && cause != nil {
		return cause
	}
	return err
}

// allowLog reports whether a line of the given cause may be written now, adding nothing.
func (s *registrationServer) allowLog(key string) bool {
	ok, _ := s.logs.allow(key, s.m.cfg.Clock.Now())
	return ok
}

// logError writes err with msg unless a line of the same cause was written within
// logRepeatInterval; the line that passes carries "suppressedRepeats" when some were held back.
func (s *registrationServer) logError(log klog.Logger, key string, err error, msg string) {
	ok, suppressed := s.logs.allow(key, s.m.cfg.Clock.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		log = log.WithValues("suppressedRepeats", suppressed)
	}
	log.Error(err, msg)
}

// registerStatus is the status a Register whose connection to the plugin failed sends back.
// The kubelet returns plain Go errors from Register, which gRPC sends as codes.Unknown with the
// error's text; so does kdm, whatever gRPC status or context error the error wraps (left as is,
// gRPC would lift an inner Unimplemented or DeadlineExceeded to the top). kdm's own refusal of
// a socket that serves another resource is codes.AlreadyExists. (A call the in-flight limiter
// superseded fails with codes.ResourceExhausted without coming through here.)
func registerStatus(err error) error {
	if errors.Is(err, ErrSocketInUse) {
		return status.Error(codes.AlreadyExists, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}

// connect dials the plugin at path and makes it the resource's current instance. As with the
// kubelet, a previous instance is not stopped: its connection and ListAndWatch stream stay
// open, because some plugins (ROCm's, registering twice when they start before the kubelet)
// treat a closed stream as fatal and exit, taking the new instance's devices with them. The
// replaced instance's lists are not applied (updateDevices), and its stream ending can no
// longer touch the resource (runEndpoint); it ends when the plugin closes it or at Stop, which
// cancels runCtx. A failed dial leaves the previous instance, if any, in place.
//
// path must be resolved (no symlinks), so that one socket has one name; name is the socket
// as the plugin named it (the plugin directory joined with the Register endpoint), which
// the kubelet v1.37's refusal quotes. Under Policy.RejectSameSocketRegistration a socket
// that a connected instance of the same resource serves is refused with
// errAlreadyConnected once the dial and the options call have succeeded, and nothing
// changes. A socket that a live endpoint of another resource already serves is refused with
// ErrSocketInUse, both before the dial and again, atomically with the swap, under mu: of two
// resources racing for one socket, exactly one wins. It returns the instance it made
// current, so that a caller that tracks it (the plugins_registry watcher) never mistakes a
// later instance for its own.
func (m *Manager) connect(ctx context.Context, resource, path, name string) (*endpoint.Endpoint, error) {
	if err := m.mayConnect(resource, path); err != nil {
		return nil, err
	}
	ep, err := endpoint.Dial(ctx, resource, path, m.cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if m.testHookAfterDial != nil {
		m.testHookAfterDial()
	}
	m.life.Lock()
	defer m.life.Unlock()
	if !m.started || m.stopped {
		ep.Stop()
		return nil, fmt.Errorf("device manager is not running")
	}
	opts := ep.Options()
	m.mu.Lock()
	if owner := m.socketOwnerLocked(resource, path); owner != "" {
		m.mu.Unlock()
		ep.Stop()
		return nil, socketInUseError(path, owner, resource)
	}
	if m.rules.Register(m.connectedOnSocketLocked(resource, path)) == state.RegisterRefuseSameSocket {
		m.mu.Unlock()
		ep.Stop()
		return nil, &alreadyConnectedError{socket: name}
	}
	evicted := m.keepReplacedLocked(resource, m.endpoints[resource].ep)
	m.endpoints[resource] = endpointInfo{ep: ep, opts: opts}
	m.st.Connect(resource)
	m.signalDeviceChangeLocked()
	m.mu.Unlock()
	if evicted != nil {
		m.log.V(2).Info("Closing the stream of an older replaced device plugin instance",
			"resourceName", resource, "socket", evicted.SocketPath(), "kept", maxReplacedInstances)
		evicted.Stop()
	}
	m.log.V(2).Info("Device plugin connected", "resourceName", resource, "socket", path,
		"preStartRequired", opts.GetPreStartRequired(),
		"getPreferredAllocationAvailable", opts.GetGetPreferredAllocationAvailable())
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.runEndpoint(m.runCtx, resource, ep)
	}()
	return ep, nil
}

// mayConnect returns the error that refuses connecting resource to the plugin at path before
// anything is dialled: the manager is not running, or a live endpoint of another resource
// serves the socket (ErrSocketInUse). connect checks the socket again when it swaps.
func (m *Manager) mayConnect(resource, path string) error {
	if !m.isRunning() {
		return fmt.Errorf("device manager is not running")
	}
	m.mu.Lock()
	owner := m.socketOwnerLocked(resource, path)
	m.mu.Unlock()
	if owner != "" {
		return socketInUseError(path, owner, resource)
	}
	return nil
}

// alreadyConnectedError is the kubelet v1.37's refusal of a Register for a socket that a
// connected instance of the resource serves (Policy.RejectSameSocketRegistration). Its text
// is the kubelet's; like every connect error it goes back as gRPC Unknown.
type alreadyConnectedError struct{ socket string }

func (e *alreadyConnectedError) Error() string {
	return "device plugin already connected: " + e.socket
}

// connectedOnSocketLocked reports whether a connected instance of resource, the current one
// or a replaced one whose stream is still open, serves socket. Callers hold mu.
func (m *Manager) connectedOnSocketLocked(resource, socket string) bool {
	if ep := m.endpoints[resource].ep; ep != nil && !ep.IsStopped() && ep.SocketPath() == socket {
		return true
	}
	return slices.ContainsFunc(m.replaced[resource], func(ep *endpoint.Endpoint) bool {
		return !ep.IsStopped() && ep.SocketPath() == socket
	})
}

// maxReplacedInstances bounds, per resource, the replaced instances whose connections and
// streams connect keeps open. One covers a plugin that registers twice in a row; the bound
// keeps a plugin that registers in a loop from piling up connections and goroutines. The
// kubelet keeps every instance connected; under Policy.PromoteLiveInstance an evicted
// instance can no longer take over (docs/defects.md).
const maxReplacedInstances = 2

// keepReplacedLocked records old, the instance being replaced, among the resource's replaced
// instances if it is still running, and returns the oldest one beyond maxReplacedInstances,
// which the caller stops outside mu (nil if none). Callers hold mu.
func (m *Manager) keepReplacedLocked(resource string, old *endpoint.Endpoint) (evicted *endpoint.Endpoint) {
	if old == nil || old.IsStopped() {
		return nil // a checkpoint placeholder or a disconnected instance: nothing to keep
	}
	if m.replaced == nil {
		m.replaced = map[string][]*endpoint.Endpoint{}
	}
	kept := append(m.replaced[resource], old)
	if len(kept) > maxReplacedInstances {
		evicted, kept = kept[0], kept[1:]
		delete(m.replacedLists, evicted)
	}
	m.replaced[resource] = kept
	return evicted
}

// forgetReplacedLocked drops ep from the resource's replaced instances once its stream has
// ended, and tells waiters (Resources reports the count). Callers hold mu.
func (m *Manager) forgetReplacedLocked(resource string, ep *endpoint.Endpoint) {
	defer m.signalDeviceChangeLocked()
	delete(m.replacedLists, ep)
	kept := slices.DeleteFunc(m.replaced[resource], func(e *endpoint.Endpoint) bool { return e == ep })
	if len(kept) == 0 {
		delete(m.replaced, resource)
		return
	}
	m.replaced[resource] = kept
}

// promoteLocked makes the replaced instance of resource at index i of m.replaced the current
// one (the core's state.DisconnectPromote), and returns it with the last device list it sent
// while replaced (nil if it sent none: the resource's devices then stay as they are until it
// sends one). Callers hold mu.
func (m *Manager) promoteLocked(resource string, i int) (*endpoint.Endpoint, []*pluginapi.Device) {
	ep := m.replaced[resource][i]
	devs := m.replacedLists[ep]
	m.forgetReplacedLocked(resource, ep)
	m.endpoints[resource] = endpointInfo{ep: ep, opts: ep.Options()}
	return ep, devs
}

// liveReplacedLocked lists, oldest first, whether each replaced instance of resource is
// still connected: what the core's Disconnect decision reads. Callers hold mu.
func (m *Manager) liveReplacedLocked(resource string) []bool {
	kept := m.replaced[resource]
	out := make([]bool, len(kept))
	for i, ep := range kept {
		out[i] = !ep.IsStopped()
	}
	return out
}

// isRunning reports whether Start has succeeded and Stop has not been called.
func (m *Manager) isRunning() bool {
	m.life.Lock()
	defer m.life.Unlock()
	return m.started && !m.stopped
}

// runEndpoint streams the plugin's devices until the stream ends: the plugin closes it or goes
// away, ep is stopped, or ctx (the manager's runCtx) ends at Stop. Only if ep is still the
// resource's current instance does its end touch the resource: under
// Policy.PromoteLiveInstance a replaced instance that is still connected takes over (its last
// list, if it sent one while replaced, is applied), otherwise the devices are marked
// unhealthy. A replaced instance is only forgotten, whenever its stream ends.
func (m *Manager) runEndpoint(ctx context.Context, resource string, ep *endpoint.Endpoint) {
	log := m.log.WithValues("resourceName", resource, "socket", ep.SocketPath())
	err := ep.Run(ctx, func(devs []*pluginapi.Device) { m.updateDevices(resource, ep, devs) })
	ep.Stop() // stamps the stop time before anyone can see the devices turn unhealthy
	var promoted *endpoint.Endpoint
	var promotedList []*pluginapi.Device
	m.mu.Lock()
	current := m.endpoints[resource].ep == ep
	switch d := m.rules.Disconnect(current, m.liveReplacedLocked(resource), ctx.Err() != nil); d.Kind {
	case state.DisconnectForget:
		m.forgetReplacedLocked(resource, ep)
	case state.DisconnectPromote:
		promoted, promotedList = m.promoteLocked(resource, d.Promote)
		m.signalDeviceChangeLocked()
	default:
		m.markResourceUnhealthyLocked(resource, ep.StopTime())
	}
	m.mu.Unlock()
	switch {
	case promoted != nil:
		log.Info("Device plugin disconnected; another connected instance serves the resource",
			"err", err, "promotedSocket", promoted.SocketPath())
		if promotedList != nil {
			m.applyPromotedList(resource, promoted, promotedList)
		}
	case current:
		log.Info("Device plugin disconnected", "err", err)
	default:
		log.V(2).Info("Stream of a replaced device plugin instance ended", "err", err)
	}
}

// markResourceUnhealthyLocked records that the resource's plugin went away at stoppedAt:
// every healthy device becomes unhealthy, since nothing it advertised can be allocated, and
// capacity is kept for the grace period. Callers hold mu.
func (m *Manager) markResourceUnhealthyLocked(resource string, stoppedAt time.Time) {
	if !m.disconnectLocked(resource, stoppedAt) {
		return
	}
	m.signalDeviceChangeLocked()
	m.log.V(2).Info("Marked all devices of resource unhealthy", "resourceName", resource)
}

// Package plugintest is a test double for device-plugin managers: a deviceplugin.Plugin that
// also counts and records the calls it receives, lets a test wait for them, and misbehaves on
// demand (Faults, DropStreams). It is built only on the SDK's extension points (the
// interceptors in deviceplugin.Config and Plugin.Done), so it serves exactly what a production
// plugin serves. kdm's tests, scenario runner and conformance fault plugin use it; a real
// plugin uses package deviceplugin alone.
//
// Every call is recorded before its fault applies. Counts are always kept; copies of the
// requests only under the RecordRequests option. Wait methods (WaitForRegistrations,
// WaitForStreams, WaitForCalls) are woken by the events they wait for; nothing polls.
package plugintest

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"

	"github.com/kdm-project/kdm/deviceplugin"
)

// secondRegisterWait bounds how long RegisterTwice and ExitOnReregisterAfterStreamClose wait
// for the manager to open a stream after a Register.
const secondRegisterWait = time.Second

// ErrStreamClosed is wrapped by Exited when a fault made the plugin stop itself after the
// manager closed one of its ListAndWatch streams.
var ErrStreamClosed = errors.New("ListAndWatch stream closed by the manager")

// Option changes what New builds.
type Option func(*Plugin)

// RecordRequests keeps a deep copy of every Allocate, GetPreferredAllocation and
// PreStartContainer request, for Calls and WaitForCalls. Without it the double keeps only
// the counts, so a long scenario's memory does not grow with the calls it answers.
func RecordRequests() Option { return func(p *Plugin) { p.record = true } }

// Plugin is a deviceplugin.Plugin with recording, waits and faults. Every method is safe for
// concurrent use; the embedded Plugin's methods work as documented there.
type Plugin struct {
	*deviceplugin.Plugin
	log    klog.Logger
	clock  clock.Clock
	record bool

	// mu guards everything below. It is never held across an RPC or a wait.
	mu            sync.Mutex
	faults        Faults
	calls         Calls
	registrations int
	open          map[*openStream]struct{}
	opened        uint64        // streams opened so far; each openStream keeps its number
	exitErr       error         // why the plugin stopped itself, else nil
	changed       chan struct{} // closed and replaced whenever a waited-for count changes
}

// openStream is one ListAndWatch stream being served; cancel ends it.
type openStream struct {
	cancel  context.CancelFunc
	seq     uint64 // the order in which the streams opened
	dropped bool   // guarded by Plugin.mu
}

// New returns an unstarted double serving cfg, which must leave the three interceptors nil
// (the double sets them). It fails as deviceplugin.New does.
func New(cfg deviceplugin.Config, opts ...Option) (*Plugin, error) {
	if cfg.UnaryInterceptor != nil || cfg.StreamInterceptor != nil || cfg.RegisterInterceptor != nil {
		return nil, fmt.Errorf("%w: plugintest sets UnaryInterceptor, StreamInterceptor and RegisterInterceptor itself", deviceplugin.ErrInvalidConfig)
	}
	p := &Plugin{log: cfg.Logger, clock: cfg.Clock, open: map[*openStream]struct{}{}, changed: make(chan struct{})}
	for _, o := range opts {
		o(p)
	}
	if p.log.GetSink() == nil {
		p.log = klog.Background()
	}
	p.log = p.log.WithValues("resourceName", cfg.ResourceName)
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	cfg.UnaryInterceptor, cfg.StreamInterceptor, cfg.RegisterInterceptor = p.interceptUnary, p.interceptStream, p.interceptRegister
	sdk, err := deviceplugin.New(cfg)
	if err != nil {
		return nil, err
	}
	p.Plugin = sdk
	return p, nil
}

// Run is deviceplugin.Plugin.Run, except that it returns Exited() when the plugin stopped
// itself.
func (p *Plugin) Run(ctx context.Context) error {
	if err := p.Plugin.Run(ctx); err != nil {
		return err
	}
	return p.Exited()
}

// SetFaults replaces the scripted faults. Safe at any time, before or after Start.
func (p *Plugin) SetFaults(f Faults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = f
}

// Calls returns deep copies of the requests received so far (none without RecordRequests)
// and the call counts.
func (p *Plugin) Calls() Calls {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls.clone()
}

// Registrations counts successful registrations so far: Register calls that returned OK in
// RegisterWithKubelet mode (two per registration under RegisterTwice), NotifyRegistrationStatus
// calls with PluginRegistered in PluginWatcher mode. Always 0 in NoRegistration mode.
func (p *Plugin) Registrations() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.registrations
}

// Exited returns nil while the plugin has not stopped itself, and afterwards why it did: an
// error wrapping ErrStreamClosed when ExitOnStreamClose or ExitOnReregisterAfterStreamClose
// made it exit. A Stop by the caller is not an exit.
func (p *Plugin) Exited() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// DropStreams ends every open ListAndWatch stream with an Unavailable error, as a plugin
// crash would look to the manager, while the plugin keeps serving: a manager that dials
// again gets a fresh stream.
func (p *Plugin) DropStreams() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for st := range p.open {
		st.dropped = true
		st.cancel()
		delete(p.open, st)
	}
	p.log.V(2).Info("Dropped every ListAndWatch stream")
}

// DropOlderStreams ends, as DropStreams does, every open ListAndWatch stream but the one
// opened last (the stream of the plugin's latest registration), and returns how many it
// ended.
func (p *Plugin) DropOlderStreams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var newest *openStream
	for st := range p.open {
		if newest == nil || st.seq > newest.seq {
			newest = st
		}
	}
	n := 0
	for st := range p.open {
		if st != newest {
			st.dropped = true
			st.cancel()
			delete(p.open, st)
			n++
		}
	}
	return n
}

// OpenStreams is the number of ListAndWatch streams open right now (dropped ones excluded).
func (p *Plugin) OpenStreams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.open)
}

// WaitForRegistrations blocks until Registrations() >= n. It returns ctx's error when ctx
// ends first, and an error wrapping deviceplugin.ErrStopped when the plugin stops short of n.
// It may be called before Start.
func (p *Plugin) WaitForRegistrations(ctx context.Context, n int) error {
	return p.waitUntil(ctx, fmt.Sprintf("%d registrations", n), func() bool { return p.registrations >= n })
}

// WaitForStreams blocks until at least n ListAndWatch streams have been opened in total
// (Calls().ListAndWatch >= n). Errors as for WaitForRegistrations.
func (p *Plugin) WaitForStreams(ctx context.Context, n int) error {
	return p.waitUntil(ctx, fmt.Sprintf("%d ListAndWatch streams", n), func() bool { return p.calls.ListAndWatch >= n })
}

// WaitForCalls blocks until cond holds for the calls received so far. cond gets a private
// copy and runs each time a call is recorded; it must not block. Errors as for
// WaitForRegistrations.
func (p *Plugin) WaitForCalls(ctx context.Context, cond func(Calls) bool) error {
	return p.waitUntil(ctx, "calls condition", func() bool { return cond(p.calls.clone()) })
}

// waitUntil re-evaluates cond (under p.mu) after every notifyLocked until it holds.
func (p *Plugin) waitUntil(ctx context.Context, what string, cond func() bool) error {
	for {
		p.mu.Lock()
		ok, changed := cond(), p.changed
		p.mu.Unlock()
		if ok {
			return nil
		}
		if p.stopping() {
			return fmt.Errorf("waiting for %s: %w", what, deviceplugin.ErrStopped)
		}
		select {
		case <-changed:
		case <-p.Done():
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// notifyLocked wakes every Wait* caller. p.mu must be held.
func (p *Plugin) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// stopping reports whether the plugin has begun to stop.
func (p *Plugin) stopping() bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// interceptUnary records a unary call and applies its fault before the SDK answers; it
// counts a positive NotifyRegistrationStatus once the SDK has taken it.
func (p *Plugin) interceptUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	var (
		hangs bool
		ferr  error
	)
	p.mu.Lock()
	f := p.faults
	switch path.Base(info.FullMethod) {
	case "GetDevicePluginOptions":
		p.calls.Options++
		hangs = f.HangOptions
	case "Allocate":
		keep(p.record, &p.calls.Allocate, req)
		hangs, ferr = f.HangAllocate, f.AllocateErr
	case "GetPreferredAllocation":
		keep(p.record, &p.calls.Preferred, req)
		hangs, ferr = f.HangPreferred, f.PreferredErr
	case "PreStartContainer":
		keep(p.record, &p.calls.PreStart, req)
		hangs, ferr = f.HangPreStart, f.PreStartErr
	case "GetInfo":
		p.calls.GetInfo++
	}
	p.notifyLocked()
	p.mu.Unlock()
	switch {
	case hangs:
		return nil, p.hang(ctx)
	case ferr != nil:
		return nil, ferr
	}
	resp, err := handler(ctx, req)
	if st, ok := req.(*registerapi.RegistrationStatus); ok && err == nil && st.GetPluginRegistered() {
		p.countRegistration()
	}
	return resp, err
}

// keep appends a copy of req to list when on.
func keep[M proto.Message](on bool, list *[]M, req any) {
	if on {
		*list = append(*list, proto.Clone(req.(M)).(M))
	}
}

// hang blocks until the RPC's ctx ends or the plugin stops, and returns the matching
// status error.
func (p *Plugin) hang(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-p.Done():
		return status.Error(codes.Unavailable, "device plugin stopped")
	}
}

// streamWithContext hands the SDK a stream whose context DropStreams can end.
type streamWithContext struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *streamWithContext) Context() context.Context { return s.ctx }

// interceptStream counts a ListAndWatch stream, serves it with a context DropStreams can
// cancel, and afterwards tells a drop (Unavailable) from a stream the manager closed.
func (p *Plugin) interceptStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	st := &openStream{cancel: cancel}
	p.mu.Lock()
	p.opened++
	st.seq = p.opened
	if !p.stopping() {
		p.calls.ListAndWatch++
	}
	p.open[st] = struct{}{}
	p.notifyLocked()
	p.mu.Unlock()
	err := handler(srv, &streamWithContext{ServerStream: ss, ctx: ctx})
	p.mu.Lock()
	delete(p.open, st)
	dropped := st.dropped
	p.notifyLocked()
	p.mu.Unlock()
	if dropped {
		return status.Error(codes.Unavailable, "ListAndWatch stream dropped by the device plugin")
	}
	if ss.Context().Err() != nil {
		p.streamClosedByManager()
	}
	return err
}

// streamClosedByManager records that the client ended a ListAndWatch stream while the plugin
// was running and, under ExitOnStreamClose, makes the plugin exit: Stop runs on a goroutine
// of its own, because Stop waits for the RPC handlers, this one included. A later Stop by
// the caller waits for that one to finish (Stop is idempotent), so nothing outlives it.
func (p *Plugin) streamClosedByManager() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping() {
		return // the plugin's own Stop ended the stream
	}
	p.calls.StreamsClosedByManager++
	p.notifyLocked()
	if p.faults.ExitOnStreamClose {
		p.exitLocked("exiting (ExitOnStreamClose fault)", "ListAndWatch stream closed by the manager; device plugin exiting")
	}
}

// exitLocked makes the plugin stop itself, once, with an Exited error wrapping
// ErrStreamClosed. p.mu must be held.
func (p *Plugin) exitLocked(why, msg string) {
	if p.exitErr != nil || p.stopping() {
		return
	}
	p.exitErr = fmt.Errorf("%w: %s", ErrStreamClosed, why)
	p.log.Info(msg, "path", p.SocketPath())
	go p.Stop()
}

// countRegistration counts one successful registration and wakes waiters.
func (p *Plugin) countRegistration() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.registrations++
	p.notifyLocked()
}

// interceptRegister sends the SDK's Register, counts it, and applies RegisterTwice and
// ExitOnReregisterAfterStreamClose.
func (p *Plugin) interceptRegister(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	p.mu.Lock()
	streams, reregister := p.calls.ListAndWatch, p.registrations > 0
	twice, delay := p.faults.RegisterTwice, p.faults.SecondRegisterDelay
	p.mu.Unlock()
	register := func() error {
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		p.countRegistration()
		return nil
	}
	if err := register(); err != nil {
		return err
	}
	if twice {
		// Let the manager open the first instance's stream, so that the second Register
		// replaces a live instance.
		p.waitForStreamsShortly(ctx, streams+1)
		if delay > 0 {
			t := p.clock.NewTimer(delay)
			select {
			case <-t.C():
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("waiting to Register again: %w", ctx.Err())
			}
		}
		if err := register(); err != nil {
			return err
		}
	}
	if reregister {
		p.exitAfterReregister(ctx, streams)
	}
	return nil
}

// waitForStreamsShortly waits, at most secondRegisterWait, until n streams were opened.
func (p *Plugin) waitForStreamsShortly(ctx context.Context, n int) {
	wctx, cancel := context.WithTimeout(ctx, secondRegisterWait)
	defer cancel()
	_ = p.WaitForStreams(wctx, n)
}

// exitAfterReregister applies ExitOnReregisterAfterStreamClose after a successful
// re-registration: if the manager closed one of our streams before it, wait (at most
// secondRegisterWait) for the manager to open the stream it had to open after streams
// streams, then exit as streamClosedByManager does.
func (p *Plugin) exitAfterReregister(ctx context.Context, streams int) {
	p.mu.Lock()
	armed := p.faults.ExitOnReregisterAfterStreamClose && p.calls.StreamsClosedByManager > 0
	p.mu.Unlock()
	if !armed {
		return
	}
	p.waitForStreamsShortly(ctx, streams+1)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.exitLocked("exiting at re-registration (ExitOnReregisterAfterStreamClose fault)",
		"Re-registered after the manager closed a ListAndWatch stream; device plugin exiting")
}

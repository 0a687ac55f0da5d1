package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Bounds on the Register calls served at once. A Register first waits for the plugin's socket
// to answer (endpoint.Probe: one file descriptor, no gRPC connection), then dials it and reads
// GetDevicePluginOptions (a gRPC connection and its goroutines). A live plugin answers both
// within milliseconds, while a socket that accepts but never answers holds its call for the
// whole dial timeout. So the two stages are bounded apart: calls whose socket has not answered
// yet never take a dial's place from calls whose plugin answers, however many there are. A
// call beyond a bound is served all the same, and an older call of the same stage is
// cancelled to make room: under maxRegistersPerEndpoint the oldest for the same resource and
// endpoint (it dials the same socket, so it is moot), under a total the oldest of the
// registrant holding the most calls: the busiest principal (user and control group), within it
// the busiest process, then connection (see registrant). A flood turns over among its own
// calls, however fast it comes, and another principal's call is never cancelled while the
// flood holds more calls than it.
const (
	// maxRegistersPerEndpoint is how many Register calls for one resource and endpoint may
	// dial at once; a plugin that restarts registers once or twice.
	maxRegistersPerEndpoint = 2
	// maxRegistersTotal is how many Register calls may dial at once, all resources together.
	// It bounds the memory and goroutines that dials in flight hold.
	maxRegistersTotal = 32
	// maxRegistersAwaitingAnswer is how many Register calls may wait at once for their
	// plugin's socket to answer. Each holds a file descriptor and the call's own goroutine,
	// a few KiB, and waits at most the dial timeout.
	maxRegistersAwaitingAnswer = 1024
)

// ErrSocketInUse is wrapped by the error that refuses a registration whose socket already
// serves another resource through a live endpoint.
var ErrSocketInUse = errors.New("plugin socket already serves another resource")

// socketInUse refuses registering resource on socket, which serves owner through a live
// endpoint. It matches ErrSocketInUse with errors.Is.
type socketInUse struct {
	socket, owner, resource string
}

func socketInUseError(socket, owner, resource string) error {
	return &socketInUse{socket: socket, owner: owner, resource: resource}
}

func (e *socketInUse) Error() string {
	return fmt.Sprintf("%v: socket %s serves resource %q; refusing to register resource %q on it",
		ErrSocketInUse, e.socket, e.owner, e.resource)
}

func (e *socketInUse) Is(target error) bool { return target == ErrSocketInUse }

// ErrRegistrationSuperseded is matched (errors.Is) by the error of a Register call cancelled
// because newer calls needed its slot (see maxRegistersTotal and maxRegistersAwaitingAnswer). gRPC sends it as
// codes.ResourceExhausted.
var ErrRegistrationSuperseded = errors.New("registration cancelled: superseded by newer registrations")

// supersededError is the cause with which registerLimiter cancels a call's context.
type supersededError struct {
	resource, endpoint string
	bound              string                  // which bound the newer call reached
	cancel             context.CancelCauseFunc // the call's
}

func (e *supersededError) Error() string {
	return fmt.Sprintf("%v (%s) while dialling endpoint %q of resource %q; a plugin that answers registers within milliseconds, retry",
		ErrRegistrationSuperseded, e.bound, e.endpoint, e.resource)
}

func (e *supersededError) Is(target error) bool { return target == ErrRegistrationSuperseded }

// GRPCStatus makes gRPC send the error as codes.ResourceExhausted with its text.
func (e *supersededError) GRPCStatus() *status.Status {
	return status.New(codes.ResourceExhausted, e.Error())
}

// registerLimiter bounds the Register calls of one stage in flight, per resource and endpoint
// and in all. Nothing is refused and nothing waits: a call beyond a bound is admitted and an
// older call is cancelled (see maxRegistersTotal), with a *supersededError as its context's
// cause. The zero value is ready to use with the dialling stage's default bounds. It is safe
// for concurrent use.
type registerLimiter struct {
	maxPerEndpoint, maxTotal int // zero: the defaults of the stage
	// awaiting makes it the limiter of the calls waiting for their plugin's socket to
	// answer: maxRegistersAwaitingAnswer in all by default, none per endpoint.
	awaiting bool

	mu    sync.Mutex
	calls []*registerCall // in flight, oldest first; at most maxTotal
}

// registerCall is one admitted Register call.
type registerCall struct {
	resource, endpoint string
	from               registrant
	cancel             context.CancelCauseFunc
}

// admit counts one Register call for resource and endpoint, from the registrant that ctx's
// gRPC peer names, and returns the context the call must run under: parent's, also cancelled
// if newer calls supersede it, when superseded(ctx) returns the cause. The caller must call
// done exactly once, when the call ends; later calls of done do nothing. The calls it
// supersedes are cancelled before it returns.
func (l *registerLimiter) admit(parent context.Context, resource, endpoint string) (ctx context.Context, done func()) {
	perEndpoint, total, served := l.maxPerEndpoint, l.maxTotal, "are served"
	switch {
	case l.awaiting:
		served = "wait for their plugin to answer"
		if total <= 0 {
			total = maxRegistersAwaitingAnswer
		}
		if perEndpoint <= 0 {
			perEndpoint = total // no bound of its own
		}
	default:
		if perEndpoint <= 0 {
			perEndpoint = maxRegistersPerEndpoint
		}
		if total <= 0 {
			total = maxRegistersTotal
		}
	}
	ctx, cancel := context.WithCancelCause(parent)
	c := &registerCall{resource: resource, endpoint: endpoint, from: registrantOf(parent), cancel: cancel}
	var victims []*supersededError
	supersede := func(v *registerCall, bound string) {
		l.calls = slices.DeleteFunc(l.calls, func(o *registerCall) bool { return o == v })
		victims = append(victims, &supersededError{resource: v.resource, endpoint: v.endpoint, bound: bound, cancel: v.cancel})
	}
	l.mu.Lock()
	same := 0
	for _, o := range l.calls {
		if o.resource == resource && o.endpoint == endpoint {
			same++
		}
	}
	if same >= perEndpoint {
		i := slices.IndexFunc(l.calls, func(o *registerCall) bool { return o.resource == resource && o.endpoint == endpoint })
		supersede(l.calls[i], fmt.Sprintf("%d calls for one resource and endpoint %s at once", perEndpoint, served))
	}
	l.calls = append(l.calls, c)
	if len(l.calls) > total {
		supersede(l.victimLocked(), fmt.Sprintf("%d device plugin registrations %s at once", total, served))
	}
	l.mu.Unlock()
	for _, v := range victims {
		v.cancel(v)
	}
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			l.mu.Lock()
			l.calls = slices.DeleteFunc(l.calls, func(o *registerCall) bool { return o == c })
			l.mu.Unlock()
			cancel(nil)
		})
	}
}

// victimLocked picks the call to cancel when more than the total bound are in flight: the
// oldest call of the principal (user and control group) holding the most calls, within it of
// the process holding the most, and within that of the connection holding the most; ties go
// to the registrant whose oldest call is the oldest. The newest call, last in calls, is never
// picked. Callers hold mu; calls holds at least two.
func (l *registerLimiter) victimLocked() *registerCall {
	perPrincipal := map[principal]int{}
	perProcess := map[processKey]int{}
	perConn := map[registrant]int{}
	for _, c := range l.calls {
		perPrincipal[c.from.principal]++
		perProcess[c.from.process()]++
		perConn[c.from]++
	}
	busier := func(c, than *registerCall) bool {
		if a, b := perPrincipal[c.from.principal], perPrincipal[than.from.principal]; a != b || c.from.principal != than.from.principal {
			return a > b
		}
		if a, b := perProcess[c.from.process()], perProcess[than.from.process()]; a != b || c.from.pid != than.from.pid {
			return a > b
		}
		return perConn[c.from] > perConn[than.from]
	}
	// Oldest first: a later call takes over only if its registrant holds strictly more.
	var victim *registerCall
	for _, c := range l.calls[:len(l.calls)-1] {
		if victim == nil || busier(c, victim) {
			victim = c
		}
	}
	return victim
}

// processKey names a process within its principal.
type processKey struct {
	principal principal
	pid       int32
}

func (r registrant) process() processKey { return processKey{r.principal, r.pid} }

// inFlight returns how many calls count.
func (l *registerLimiter) inFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// superseded returns the *supersededError with which the limiter cancelled ctx, a context
// returned by admit, or nil if it did not.
func superseded(ctx context.Context) error {
	var s *supersededError
	if errors.As(context.Cause(ctx), &s) {
		return s
	}
	return nil
}

// socketOwnerLocked returns the resource, other than resource, whose current endpoint is live
// (connected and not stopped) on socket, or "" if there is none. Callers hold mu.
func (m *Manager) socketOwnerLocked(resource, socket string) string {
	for res, info := range m.endpoints {
		if res == resource || info.ep == nil || info.ep.SocketPath() != socket {
			continue
		}
		if !info.ep.IsStopped() {
			return res
		}
	}
	return ""
}

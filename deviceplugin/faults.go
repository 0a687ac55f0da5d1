package deviceplugin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Faults are scripted misbehaviours for testing a manager. The zero value means none.
// SetFaults replaces the whole set; it applies to calls that arrive afterwards. A call is
// always recorded in Calls before its fault applies.
type Faults struct {
	// HangOptions, HangAllocate, HangPreferred and HangPreStart make the RPC block until the
	// caller's context ends (deadline or cancel; the client sees DeadlineExceeded or
	// Canceled) or the plugin stops (Unavailable).
	HangOptions, HangAllocate, HangPreferred, HangPreStart bool
	// AllocateErr, PreferredErr and PreStartErr are returned instead of a response. A plain
	// error reaches the client as code Unknown with its message; a gRPC status error keeps
	// its code.
	AllocateErr, PreferredErr, PreStartErr error
}

// Calls is what the plugin has received so far, in arrival order. Calls() returns deep
// copies, so the caller may keep and modify them.
type Calls struct {
	Allocate  []*pluginapi.AllocateRequest
	Preferred []*pluginapi.PreferredAllocationRequest
	PreStart  []*pluginapi.PreStartContainerRequest
	// Options counts GetDevicePluginOptions calls.
	Options int
	// ListAndWatch counts ListAndWatch streams opened.
	ListAndWatch int
	// GetInfo counts pluginregistration GetInfo calls (PluginWatcher mode).
	GetInfo int
}

func (c Calls) clone() Calls {
	return Calls{
		Allocate:     cloneAll(c.Allocate),
		Preferred:    cloneAll(c.Preferred),
		PreStart:     cloneAll(c.PreStart),
		Options:      c.Options,
		ListAndWatch: c.ListAndWatch,
		GetInfo:      c.GetInfo,
	}
}

func cloneAll[M proto.Message](in []M) []M {
	if in == nil {
		return nil
	}
	out := make([]M, len(in))
	for i, m := range in {
		out[i] = proto.Clone(m).(M)
	}
	return out
}

// SetFaults replaces the scripted faults. Safe at any time, before or after Start.
func (p *Plugin) SetFaults(f Faults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = f
}

// Calls returns deep copies of the requests received so far and the call counts.
func (p *Plugin) Calls() Calls {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls.clone()
}

// record runs fn (which appends to or counts in p.calls) under the lock, wakes waiters, and
// returns the faults in force and the plugin's lifetime context (nil before Start).
func (p *Plugin) record(fn func(*Calls)) (Faults, context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(&p.calls)
	p.notifyLocked()
	return p.faults, p.ctx
}

// hang blocks until the RPC's ctx ends or the plugin stops, and returns the matching
// status error.
func hang(ctx, life context.Context) error {
	var stopped <-chan struct{}
	if life != nil {
		stopped = life.Done()
	}
	select {
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-stopped:
		return status.Error(codes.Unavailable, "device plugin stopped")
	}
}

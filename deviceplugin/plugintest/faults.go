package plugintest

import (
	"time"

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
	// ExitOnStreamClose makes the plugin treat a ListAndWatch stream closed by the manager
	// (the client cancelled the call or dropped its connection while the plugin ran) as
	// fatal, as some real plugins do: the plugin records the cause (see Exited) and stops
	// itself, exactly as if Stop had been called, which is how a plugin process exiting
	// looks to the manager. Streams ended by the plugin itself (DropStreams, Stop) do not
	// count.
	ExitOnStreamClose bool
	// RegisterTwice makes every successful Register (RegisterWithKubelet mode, at Start and
	// on re-registration) followed at once by a second, identical Register, as a plugin
	// that starts before the kubelet can do. The second call is sent as soon as the manager
	// has opened a ListAndWatch stream after the first (or after a second), so
	// that the first instance is live when it is replaced. It takes effect for
	// registrations that start after SetFaults.
	RegisterTwice bool
	// SecondRegisterDelay, under RegisterTwice, delays the second Register by this long after
	// the manager opened the first instance's stream, as a plugin does that registers again
	// on a file event of its own some time after its first Register (seen with AMD's ROCm
	// device plugin started before the kubelet). Zero sends it at once.
	SecondRegisterDelay time.Duration
	// ExitOnReregisterAfterStreamClose makes the plugin exit at its first re-registration
	// (RegisterWithKubelet mode, after the manager re-created its socket) once the manager
	// has closed one of its ListAndWatch streams: the Register succeeds, the manager opens the
	// new stream (or a second passes), and then the plugin records the cause (see
	// Exited, which wraps ErrStreamClosed) and stops itself, as ExitOnStreamClose does. It is
	// the fault of a plugin whose device scanner keeps sending to the closed stream's channel
	// and crashes on its next scan once the manager is back (seen with Intel's GPU plugin:
	// "send on closed channel").
	ExitOnReregisterAfterStreamClose bool
}

// DoubleRegisterExitOnClose is the fault profile of a plugin that registers twice in a row
// when it starts and exits when the manager closes its ListAndWatch stream (seen with
// AMD's ROCm device plugin started before the kubelet). A manager that closes the stream of
// the instance it replaces makes such a plugin exit, and its devices go away until it is
// restarted; the kubelet leaves the old stream open. Set it before Start to cover the
// first registration.
func DoubleRegisterExitOnClose() Faults {
	return Faults{ExitOnStreamClose: true, RegisterTwice: true}
}

// Calls is what the plugin has received so far, in arrival order. Calls() returns deep
// copies, so the caller may keep and modify them. The request lists are kept only under
// the RecordRequests option and are empty otherwise; the counts are always kept.
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
	// StreamsClosedByManager counts ListAndWatch streams that the client (the manager)
	// ended while the plugin was running, whatever the faults.
	StreamsClosedByManager int
}

func (c Calls) clone() Calls {
	return Calls{
		Allocate:     cloneAll(c.Allocate),
		Preferred:    cloneAll(c.Preferred),
		PreStart:     cloneAll(c.PreStart),
		Options:      c.Options,
		ListAndWatch: c.ListAndWatch,
		GetInfo:      c.GetInfo,

		StreamsClosedByManager: c.StreamsClosedByManager,
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

package plugintest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
)

// rpcs calls each unary RPC once with ctx; the map key names the RPC.
func rpcs(c pluginapi.DevicePluginClient) map[string]func(ctx context.Context) error {
	return map[string]func(context.Context) error{
		"Options": func(ctx context.Context) error {
			_, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
			return err
		},
		"Allocate": func(ctx context.Context) error {
			_, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"a"}}}})
			return err
		},
		"Preferred": func(ctx context.Context) error {
			_, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{"a"}, AllocationSize: 1}}})
			return err
		},
		"PreStart": func(ctx context.Context) error {
			_, err := c.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: []string{"a"}})
			return err
		},
	}
}

func callCount(c Calls, rpc string) int {
	return map[string]int{"Options": c.Options, "Allocate": len(c.Allocate), "Preferred": len(c.Preferred), "PreStart": len(c.PreStart)}[rpc]
}

// TestHangFaults: a hang fault blocks the RPC until the client's deadline; the call is
// recorded; clearing the faults makes the RPC answer again.
func TestHangFaults(t *testing.T) {
	p := startPlugin(t, deviceplugin.Config{ResourceName: gpu, PluginDir: shortDir(t), Registration: deviceplugin.NoRegistration, Devices: devices(pluginapi.Healthy, "a")}, RecordRequests())
	p.SetFaults(Faults{HangOptions: true, HangAllocate: true, HangPreferred: true, HangPreStart: true})
	calls := rpcs(pluginClient(t, p.SocketPath()))
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := call(ctx)
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("%s with a hang fault: %v, want DeadlineExceeded", name, err)
		}
		if n := callCount(p.Calls(), name); n != 1 {
			t.Errorf("%s: %d calls recorded, want 1", name, n)
		}
	}
	p.SetFaults(Faults{})
	for name, call := range calls {
		if err := call(waitCtx(t)); err != nil {
			t.Errorf("%s after clearing faults: %v", name, err)
		}
	}
}

// TestHangEndsOnStop: Stop releases a hung RPC (Unavailable) and still joins everything.
func TestHangEndsOnStop(t *testing.T) {
	p := startPlugin(t, deviceplugin.Config{ResourceName: gpu, PluginDir: shortDir(t), Registration: deviceplugin.NoRegistration, Devices: devices(pluginapi.Healthy, "a")}, RecordRequests())
	p.SetFaults(Faults{HangAllocate: true})
	allocate := rpcs(pluginClient(t, p.SocketPath()))["Allocate"]
	done := make(chan error, 1)
	go func() { done <- allocate(waitCtx(t)) }()
	if err := p.WaitForCalls(waitCtx(t), func(c Calls) bool { return len(c.Allocate) == 1 }); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	select {
	case err := <-done:
		if code := status.Code(err); code != codes.Unavailable {
			t.Fatalf("hung Allocate after Stop: %v, want Unavailable", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("hung Allocate did not return after Stop")
	}
}

// TestErrorFaults: an error fault is returned instead of the response; a gRPC status keeps its
// code, a plain error arrives as Unknown with its message.
func TestErrorFaults(t *testing.T) {
	p := startPlugin(t, deviceplugin.Config{ResourceName: gpu, PluginDir: shortDir(t), Registration: deviceplugin.NoRegistration, Devices: devices(pluginapi.Healthy, "a")})
	calls := rpcs(pluginClient(t, p.SocketPath()))
	plain := errors.New("gpu fell off the bus")
	typed := status.Error(codes.ResourceExhausted, "no more VFs")
	for _, tc := range []struct {
		rpc      string
		faults   Faults
		wantCode codes.Code
		wantMsg  string
	}{
		{"Allocate", Faults{AllocateErr: plain}, codes.Unknown, plain.Error()},
		{"Preferred", Faults{PreferredErr: plain}, codes.Unknown, plain.Error()},
		{"PreStart", Faults{PreStartErr: plain}, codes.Unknown, plain.Error()},
		{"Allocate", Faults{AllocateErr: typed}, codes.ResourceExhausted, "no more VFs"},
	} {
		p.SetFaults(tc.faults)
		err := calls[tc.rpc](waitCtx(t))
		if got := status.Convert(err); got.Code() != tc.wantCode || got.Message() != tc.wantMsg {
			t.Errorf("%s with %+v: %v, want %v %q", tc.rpc, tc.faults, err, tc.wantCode, tc.wantMsg)
		}
		// Only the scripted RPC fails.
		for name, call := range calls {
			if name != tc.rpc {
				if err := call(waitCtx(t)); err != nil {
					t.Errorf("%s while %s is faulted: %v", name, tc.rpc, err)
				}
			}
		}
	}
}

// TestCallsRecorded: Calls returns deep copies of every request, in order.
func TestCallsRecorded(t *testing.T) {
	p := startPlugin(t, deviceplugin.Config{ResourceName: gpu, PluginDir: shortDir(t), Registration: deviceplugin.NoRegistration, Devices: devices(pluginapi.Healthy, "a", "b")}, RecordRequests())
	c := pluginClient(t, p.SocketPath())
	for _, ids := range [][]string{{"a"}, {"b", "a"}} {
		if _, err := c.Allocate(waitCtx(t), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}); err != nil {
			t.Fatal(err)
		}
	}
	got := p.Calls()
	var ids [][]string
	for _, r := range got.Allocate {
		ids = append(ids, r.ContainerRequests[0].DevicesIds)
	}
	if !cmp.Equal(ids, [][]string{{"a"}, {"b", "a"}}) {
		t.Fatalf("recorded Allocate requests %v", ids)
	}
	got.Allocate[0].ContainerRequests[0].DevicesIds[0] = "x"
	if p.Calls().Allocate[0].ContainerRequests[0].DevicesIds[0] != "a" {
		t.Fatal("Calls() returned the plugin's own records")
	}
}

// TestRequestsNotKeptByDefault: without RecordRequests a plugin keeps nothing per request,
// however many it answers (only the counts): its recorded lists stay empty, not merely
// unreturned, while the callbacks still see every request.
func TestRequestsNotKeptByDefault(t *testing.T) {
	const calls = 2000
	var seen atomic.Int64
	p := startPlugin(t, deviceplugin.Config{ResourceName: gpu, PluginDir: shortDir(t), Registration: deviceplugin.NoRegistration,
		Devices: devices(pluginapi.Healthy, "a"),
		Allocate: func(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			seen.Add(1)
			return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{{}}}, nil
		}})
	rpc := rpcs(pluginClient(t, p.SocketPath()))
	for range calls {
		if err := rpc["Allocate"](waitCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"Preferred", "PreStart"} {
		if err := rpc[name](waitCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if seen.Load() != calls {
		t.Fatalf("Allocate callback saw %d requests, want %d", seen.Load(), calls)
	}
	p.mu.Lock()
	kept := [3]int{cap(p.calls.Allocate), cap(p.calls.Preferred), cap(p.calls.PreStart)}
	p.mu.Unlock()
	if kept != [3]int{} {
		t.Fatalf("a plugin without RecordRequests keeps room for %v Allocate, Preferred and PreStart requests, want none", kept)
	}
	if got := p.Calls(); got.Allocate != nil || got.Preferred != nil || got.PreStart != nil {
		t.Fatalf("Calls() without RecordRequests returned requests: %d, %d, %d", len(got.Allocate), len(got.Preferred), len(got.PreStart))
	}
}

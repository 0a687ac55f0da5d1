package endpoint

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestAllocate(t *testing.T) {
	want := &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{{
		Envs:        map[string]string{"VISIBLE_DEVICES": "a,b"},
		Mounts:      []*pluginapi.Mount{{ContainerPath: "/c", HostPath: "/h", ReadOnly: true}},
		Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/x0", HostPath: "/dev/x0", Permissions: "rw"}},
		Annotations: map[string]string{"k": "v"},
		CdiDevices:  []*pluginapi.CDIDevice{{Name: "vendor.com/dev=a"}},
	}}}
	p := newStubPlugin()
	p.onAllocate = func(ctx context.Context, _ *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		if _, ok := ctx.Deadline(); ok {
			t.Error("Allocate has a deadline although AllocateTimeout is 0 (kubelet parity: none)")
		}
		return want, nil
	}
	e := dialStub(t, p, Config{})

	got, err := e.Allocate(context.Background(), []string{"a", "b"})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("Allocate = %v, want %v", got, want)
	}
	wantReq := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"a", "b"}}}}
	if reqs := p.recorded(); len(reqs) != 1 || !proto.Equal(reqs[0].(*pluginapi.AllocateRequest), wantReq) {
		t.Errorf("plugin received %v, want exactly %v", reqs, wantReq)
	}
}

func TestGetPreferredAllocation(t *testing.T) {
	want := &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{
		{DeviceIDs: []string{"b", "c"}},
	}}
	p := newStubPlugin()
	p.onPreferred = func(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
		return want, nil
	}
	e := dialStub(t, p, Config{})

	got, err := e.GetPreferredAllocation(context.Background(), []string{"a", "b", "c"}, []string{"b"}, -1)
	if err != nil {
		t.Fatalf("GetPreferredAllocation: %v", err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("GetPreferredAllocation = %v, want %v", got, want)
	}
	wantReq := &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: []string{"a", "b", "c"}, MustIncludeDeviceIDs: []string{"b"}, AllocationSize: -1,
	}}}
	if reqs := p.recorded(); len(reqs) != 1 || !proto.Equal(reqs[0].(*pluginapi.PreferredAllocationRequest), wantReq) {
		t.Errorf("plugin received %v, want exactly %v", reqs, wantReq)
	}
}

func TestPreStartContainer(t *testing.T) {
	want := &pluginapi.PreStartContainerResponse{}
	p := newStubPlugin()
	p.onPreStart = func(ctx context.Context, _ *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("PreStartContainer has no deadline; the kubelet applies 30s")
		}
		return want, nil
	}
	e := dialStub(t, p, Config{})

	got, err := e.PreStartContainer(context.Background(), []string{"a"})
	if err != nil {
		t.Fatalf("PreStartContainer: %v", err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("PreStartContainer = %v, want %v", got, want)
	}
	wantReq := &pluginapi.PreStartContainerRequest{DevicesIds: []string{"a"}}
	if reqs := p.recorded(); len(reqs) != 1 || !proto.Equal(reqs[0].(*pluginapi.PreStartContainerRequest), wantReq) {
		t.Errorf("plugin received %v, want exactly %v", reqs, wantReq)
	}
}

// Each RPC's configured deadline ends a hung plugin call with DeadlineExceeded, and the
// error is gRPC's own, as the kubelet reports it (the kubelet's 1.35+ caller context gives the
// same text).
func TestRPCDeadlines(t *testing.T) {
	const short = 200 * time.Millisecond
	p := newStubPlugin()
	p.onAllocate = func(ctx context.Context, _ *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		return nil, blockUntilDone(ctx)
	}
	p.onPreferred = func(ctx context.Context, _ *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
		return nil, blockUntilDone(ctx)
	}
	p.onPreStart = func(ctx context.Context, _ *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
		return nil, blockUntilDone(ctx)
	}
	e := dialStub(t, p, Config{AllocateTimeout: short, PreferredAllocationTimeout: short, PreStartTimeout: short})
	unbounded := dialStub(t, p, Config{})

	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Allocate": func() error { _, err := e.Allocate(ctx, []string{"a"}); return err },
		"GetPreferredAllocation": func() error {
			_, err := e.GetPreferredAllocation(ctx, []string{"a"}, nil, 1)
			return err
		},
		"PreStartContainer": func() error { _, err := e.PreStartContainer(ctx, []string{"a"}); return err },
		"Allocate with the caller's deadline only": func() error {
			cctx, cancel := context.WithTimeout(ctx, short)
			defer cancel()
			_, err := unbounded.Allocate(cctx, []string{"a"})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := call()
			if status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("error %v: code %v, want DeadlineExceeded", err, status.Code(err))
			}
			// gRPC's own status, unwrapped, as the kubelet returns it. Its description is
			// gRPC's: usually "context deadline exceeded", or the server's RST_STREAM when the
			// cancellation crosses the deadline on the wire.
			if want := "rpc error: code = DeadlineExceeded desc = "; err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "rpc to device plugin") {
				t.Errorf("error %q, want gRPC's own DeadlineExceeded status (%q...)", err, want)
			}
			if errors.Is(err, ErrStopped) {
				t.Errorf("a deadline is not a stop: %v", err)
			}
		})
	}
}

func TestRPCErrorPassesStatusThrough(t *testing.T) {
	p := newStubPlugin()
	p.onAllocate = func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		return nil, status.Error(codes.ResourceExhausted, "device busy")
	}
	e := dialStub(t, p, Config{})
	_, err := e.Allocate(context.Background(), []string{"a"})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "device busy") {
		t.Errorf("Allocate error = %v, want the plugin's ResourceExhausted", err)
	}
}

// TestRPCErrorIsTheKubelets: a failing plugin call comes back as the gRPC error itself, the
// text the kubelet gives, with no wrapper of kdm's (issue 13, item 1).
func TestRPCErrorIsTheKubelets(t *testing.T) {
	boom := errors.New("boom")
	p := newStubPlugin()
	p.onAllocate = func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		return nil, boom
	}
	p.onPreferred = func(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
		return nil, boom
	}
	p.onPreStart = func(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
		return nil, boom
	}
	e := dialStub(t, p, Config{})
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Allocate": func() error { _, err := e.Allocate(ctx, []string{"a"}); return err },
		"GetPreferredAllocation": func() error {
			_, err := e.GetPreferredAllocation(ctx, []string{"a"}, nil, 1)
			return err
		},
		"PreStartContainer": func() error { _, err := e.PreStartContainer(ctx, []string{"a"}); return err },
	} {
		t.Run(name, func(t *testing.T) {
			err := call()
			if want := "rpc error: code = Unknown desc = boom"; err == nil || err.Error() != want {
				t.Errorf("error %q, want the kubelet's %q", err, want)
			}
			if status.Code(err) != codes.Unknown || errors.Is(err, ErrStopped) {
				t.Errorf("error %v: code %v, stopped %v; want Unknown, not stopped", err, status.Code(err), errors.Is(err, ErrStopped))
			}
		})
	}
}

package endpoint

import (
	"context"
	"math"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Allocate asks the plugin to prepare deviceIDs for one container: one AllocateRequest holding
// exactly one ContainerAllocateRequest, as the kubelet sends per (container, resource). The
// call runs under ctx and, when set, Config.AllocateTimeout. A stopped endpoint fails at once
// with ErrStopped; other failures return the gRPC error as is, which is the text the kubelet
// gives (a call cut short by Stop also matches ErrStopped).
func (e *Endpoint) Allocate(ctx context.Context, deviceIDs []string) (*pluginapi.AllocateResponse, error) {
	if e.IsStopped() || e.client == nil {
		return nil, e.errStopped()
	}
	ctx, cancel := withTimeout(ctx, e.cfg.AllocateTimeout)
	defer cancel()
	resp, err := e.client.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: deviceIDs}},
	})
	if err != nil {
		return nil, e.rpcError(err)
	}
	return resp, nil
}

// GetPreferredAllocation asks the plugin which size devices it prefers among available,
// including mustInclude: one ContainerPreferredAllocationRequest, size passed through as
// given (the kubelet sends the container's total request). The call runs under ctx and, when
// set, Config.PreferredAllocationTimeout. Errors as for Allocate.
func (e *Endpoint) GetPreferredAllocation(ctx context.Context, available, mustInclude []string, size int) (*pluginapi.PreferredAllocationResponse, error) {
	if e.IsStopped() || e.client == nil {
		return nil, e.errStopped()
	}
	ctx, cancel := withTimeout(ctx, e.cfg.PreferredAllocationTimeout)
	defer cancel()
	resp, err := e.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs:   available,
			MustIncludeDeviceIDs: mustInclude,
			AllocationSize:       clampInt32(size),
		}},
	})
	if err != nil {
		return nil, e.rpcError(err)
	}
	return resp, nil
}

// PreStartContainer tells the plugin that a container using deviceIDs is about to start. The
// call runs under ctx and Config.PreStartTimeout (30s by default, as the kubelet). Errors as
// for Allocate.
func (e *Endpoint) PreStartContainer(ctx context.Context, deviceIDs []string) (*pluginapi.PreStartContainerResponse, error) {
	if e.IsStopped() || e.client == nil {
		return nil, e.errStopped()
	}
	ctx, cancel := withTimeout(ctx, e.cfg.PreStartTimeout)
	defer cancel()
	resp, err := e.client.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: deviceIDs})
	if err != nil {
		return nil, e.rpcError(err)
	}
	return resp, nil
}

// rpcError returns a failed unary RPC's error as the kubelet does: gRPC's error itself, with
// its text and status unchanged (the method and resource belong in the caller's log keys).
// When the endpoint was stopped while the call was in flight (Stop closes the connection),
// the error keeps that text and also matches ErrStopped.
func (e *Endpoint) rpcError(err error) error {
	if e.IsStopped() {
		return &interruptedError{err: err, stopped: e.errStopped()}
	}
	return err
}

// interruptedError is an RPC that failed because Stop closed the connection under it. Its text
// is the gRPC error's own, which is what the kubelet reports when its connection closes under
// a call; it matches both the gRPC status (status.Code, errors.As) and ErrStopped (errors.Is).
type interruptedError struct {
	err     error // the gRPC error
	stopped error // e.errStopped()
}

func (e *interruptedError) Error() string { return e.err.Error() }

// Unwrap gives both causes, so that errors.Is and errors.As see through to either.
func (e *interruptedError) Unwrap() []error { return []error{e.err, e.stopped} }

// clampInt32 converts the allocation size for the wire, saturating instead of wrapping around
// for values that do not fit (which no real request reaches).
func clampInt32(n int) int32 {
	switch {
	case n > math.MaxInt32:
		return math.MaxInt32
	case n < math.MinInt32:
		return math.MinInt32
	}
	return int32(n)
}

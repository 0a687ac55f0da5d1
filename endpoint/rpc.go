package endpoint

import (
	"context"
	"fmt"
	"math"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Allocate asks the plugin to prepare deviceIDs for one container: one AllocateRequest holding
// exactly one ContainerAllocateRequest, as the kubelet sends per (container, resource). The
// call runs under ctx and, when set, Config.AllocateTimeout. A stopped endpoint fails at once
// with ErrStopped; other failures wrap the gRPC error (status.Code still works).
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
		return nil, e.rpcError("Allocate", err)
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
		return nil, e.rpcError("GetPreferredAllocation", err)
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
		return nil, e.rpcError("PreStartContainer", err)
	}
	return resp, nil
}

// rpcError wraps a failed unary RPC with the method and resource. When the endpoint was
// stopped while the call was in flight (Stop closes the connection), the error also matches
// ErrStopped.
func (e *Endpoint) rpcError(method string, err error) error {
	if e.IsStopped() {
		return fmt.Errorf("%w: %s rpc interrupted: %w", e.errStopped(), method, err)
	}
	return fmt.Errorf("%s rpc to device plugin for %s failed: %w", method, e.resourceName, err)
}

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

package deviceplugin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// devicePluginServer is the v1beta1 DevicePlugin service. It is a separate type so that the
// RPC methods do not clutter Plugin's API.
type devicePluginServer struct {
	pluginapi.UnimplementedDevicePluginServer
	p *Plugin
}

var _ pluginapi.DevicePluginServer = (*devicePluginServer)(nil)

func (s *devicePluginServer) GetDevicePluginOptions(ctx context.Context, _ *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	f, life := s.p.record(func(c *Calls) { c.Options++ })
	s.p.log.V(4).Info("GetDevicePluginOptions")
	if f.HangOptions {
		return nil, hang(ctx, life)
	}
	return proto.Clone(s.p.cfg.Options).(*pluginapi.DevicePluginOptions), nil
}

func (s *devicePluginServer) ListAndWatch(_ *pluginapi.Empty, srv pluginapi.DevicePlugin_ListAndWatchServer) error {
	return s.p.serveStream(srv)
}

func (s *devicePluginServer) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	f, life := s.p.record(func(c *Calls) {
		c.Preferred = append(c.Preferred, proto.Clone(req).(*pluginapi.PreferredAllocationRequest))
	})
	s.p.log.V(4).Info("GetPreferredAllocation", "request", req)
	switch {
	case f.HangPreferred:
		return nil, hang(ctx, life)
	case f.PreferredErr != nil:
		return nil, f.PreferredErr
	}
	resp, err := s.p.cfg.GetPreferredAllocation(ctx, req)
	return answer("GetPreferredAllocation", resp, err)
}

func (s *devicePluginServer) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	f, life := s.p.record(func(c *Calls) {
		c.Allocate = append(c.Allocate, proto.Clone(req).(*pluginapi.AllocateRequest))
	})
	s.p.log.V(4).Info("Allocate", "request", req)
	switch {
	case f.HangAllocate:
		return nil, hang(ctx, life)
	case f.AllocateErr != nil:
		return nil, f.AllocateErr
	}
	resp, err := s.p.cfg.Allocate(ctx, req)
	return answer("Allocate", resp, err)
}

func (s *devicePluginServer) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	f, life := s.p.record(func(c *Calls) {
		c.PreStart = append(c.PreStart, proto.Clone(req).(*pluginapi.PreStartContainerRequest))
	})
	s.p.log.V(4).Info("PreStartContainer", "deviceIDs", req.GetDevicesIds())
	switch {
	case f.HangPreStart:
		return nil, hang(ctx, life)
	case f.PreStartErr != nil:
		return nil, f.PreStartErr
	}
	resp, err := s.p.cfg.PreStartContainer(ctx, req)
	return answer("PreStartContainer", resp, err)
}

// answer passes a callback's result through, turning (nil, nil), which gRPC would report as
// an opaque marshalling error, into an Internal error naming the method.
func answer[R any](method string, resp *R, err error) (*R, error) {
	if err == nil && resp == nil {
		return nil, status.Errorf(codes.Internal, "device plugin %s returned neither a response nor an error", method)
	}
	return resp, err
}

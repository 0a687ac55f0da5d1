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

func (s *devicePluginServer) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	s.p.log.V(4).Info("GetDevicePluginOptions")
	return proto.Clone(s.p.cfg.Options).(*pluginapi.DevicePluginOptions), nil
}

func (s *devicePluginServer) ListAndWatch(_ *pluginapi.Empty, srv pluginapi.DevicePlugin_ListAndWatchServer) error {
	return s.p.serveStream(srv)
}

func (s *devicePluginServer) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return serveCallback(ctx, s.p, "GetPreferredAllocation", req, s.p.cfg.GetPreferredAllocation)
}

func (s *devicePluginServer) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return serveCallback(ctx, s.p, "Allocate", req, s.p.cfg.Allocate)
}

func (s *devicePluginServer) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return serveCallback(ctx, s.p, "PreStartContainer", req, s.p.cfg.PreStartContainer)
}

// serveCallback serves one RPC that the plugin's callbacks answer: it logs the request at
// V(4), then callback answers, through answer.
func serveCallback[Req proto.Message, Resp any](ctx context.Context, p *Plugin, method string, req Req,
	callback func(context.Context, Req) (*Resp, error)) (*Resp, error) {
	p.log.V(4).Info(method, "request", req)
	resp, err := callback(ctx, req)
	return answer(method, resp, err)
}

// answer passes a callback's result through, turning (nil, nil), which gRPC would report as
// an opaque marshalling error, into an Internal error naming the method.
func answer[R any](method string, resp *R, err error) (*R, error) {
	if err == nil && resp == nil {
		return nil, status.Errorf(codes.Internal, "device plugin %s returned neither a response nor an error", method)
	}
	return resp, err
}

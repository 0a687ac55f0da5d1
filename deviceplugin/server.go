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
	return serveCallback(ctx, s.p, "GetPreferredAllocation", req,
		func(c *Calls) *[]*pluginapi.PreferredAllocationRequest { return &c.Preferred },
		func(f Faults) (bool, error) { return f.HangPreferred, f.PreferredErr },
		s.p.cfg.GetPreferredAllocation)
}

func (s *devicePluginServer) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return serveCallback(ctx, s.p, "Allocate", req,
		func(c *Calls) *[]*pluginapi.AllocateRequest { return &c.Allocate },
		func(f Faults) (bool, error) { return f.HangAllocate, f.AllocateErr },
		s.p.cfg.Allocate)
}

func (s *devicePluginServer) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return serveCallback(ctx, s.p, "PreStartContainer", req,
		func(c *Calls) *[]*pluginapi.PreStartContainerRequest { return &c.PreStart },
		func(f Faults) (bool, error) { return f.HangPreStart, f.PreStartErr },
		s.p.cfg.PreStartContainer)
}

// serveCallback serves one RPC that the plugin's callbacks answer. Under RecordRequests it
// appends a copy of req to the list of p's Calls that list picks (otherwise it keeps
// nothing of req), logs the request at V(4), then applies the injected
// faults that fault picks: when it hangs, the call blocks until ctx ends or the plugin stops;
// an injected error is returned as is. Otherwise callback answers, through answer.
func serveCallback[Req proto.Message, Resp any](ctx context.Context, p *Plugin, method string, req Req,
	list func(*Calls) *[]Req, fault func(Faults) (hangs bool, err error),
	callback func(context.Context, Req) (*Resp, error)) (*Resp, error) {
	f, life := p.record(func(c *Calls) {
		if p.cfg.RecordRequests {
			l := list(c)
			*l = append(*l, proto.Clone(req).(Req))
		}
	})
	p.log.V(4).Info(method, "request", req)
	switch hangs, err := fault(f); {
	case hangs:
		return nil, hang(ctx, life)
	case err != nil:
		return nil, err
	}
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

package deviceplugin

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// defaultAllocate is Config.Allocate's default: it refuses IDs that are not in the current
// device list (as real plugins do, which catches a manager handing out vanished devices) and
// otherwise answers each container request with VisibleDevicesEnv = the IDs, comma-joined.
func (p *Plugin) defaultAllocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	known := map[string]bool{}
	for _, d := range p.Devices() {
		known[d.GetID()] = true
	}
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		for _, id := range cr.GetDevicesIds() {
			if !known[id] {
				return nil, status.Errorf(codes.InvalidArgument, "invalid allocation request for %q: unknown device: %s", p.cfg.ResourceName, id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{VisibleDevicesEnv: strings.Join(cr.GetDevicesIds(), ",")},
		})
	}
	return resp, nil
}

// defaultPreferred is Config.GetPreferredAllocation's default: per container request, the
// must-include IDs first, then available IDs in the order given, without repeats, until
// AllocationSize IDs are chosen (fewer if there are not enough).
func defaultPreferred(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		size := int(cr.GetAllocationSize())
		chosen := make([]string, 0, max(size, 0))
		seen := map[string]bool{}
		for _, ids := range [][]string{cr.GetMustIncludeDeviceIDs(), cr.GetAvailableDeviceIDs()} {
			for _, id := range ids {
				if len(chosen) >= size {
					break
				}
				if !seen[id] {
					seen[id] = true
					chosen = append(chosen, id)
				}
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: chosen})
	}
	return resp, nil
}

// defaultPreStart is Config.PreStartContainer's default: an empty response.
func defaultPreStart(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

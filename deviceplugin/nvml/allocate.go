package nvml

import (
	"context"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// VisibleDevicesEnv is the variable the NVIDIA container runtime reads.
const VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"

// controlDevices are the device nodes every GPU container needs besides its GPUs.
var controlDevices = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}

// allocate answers Allocate: NVIDIA_VISIBLE_DEVICES and the device nodes, or CDI names.
func (p *Plugin) allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		var unknown []string
		r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{VisibleDevicesEnv: strings.Join(cr.DevicesIds, ",")}}
		for _, id := range cr.DevicesIds {
			g, ok := p.byUUID[id]
			if !ok {
				unknown = append(unknown, id)
				continue
			}
			if p.cfg.CDI {
				r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: p.cfg.ResourceName + "=" + id})
				continue
			}
			r.Devices = append(r.Devices, p.devSpec("nvidia"+strconv.Itoa(g.Minor)))
		}
		if len(unknown) > 0 {
			return nil, status.Errorf(codes.InvalidArgument, "unknown GPUs %v for %s", unknown, p.cfg.ResourceName)
		}
		if !p.cfg.CDI {
			for _, c := range controlDevices {
				r.Devices = append(r.Devices, p.devSpec(c))
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}

// devSpec is the device node of that name: from Config.DeviceDir on the host, under /dev in
// the container.
func (p *Plugin) devSpec(name string) *pluginapi.DeviceSpec {
	host := "/dev/" + name
	if p.cfg.DeviceDir != "" {
		host = filepath.Join(p.cfg.DeviceDir, name)
	}
	return &pluginapi.DeviceSpec{HostPath: host, ContainerPath: "/dev/" + name, Permissions: "rw"}
}

// preferred answers GetPreferredAllocation: the must-include GPUs, then GPUs on the NUMA node
// of the must-include ones (or the node with the most available GPUs), then the lowest
// indexes.
func (p *Plugin) preferred(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses,
			&pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: p.choose(cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize))})
	}
	return resp, nil
}

func (p *Plugin) choose(available, mustInclude []string, size int) []string {
	chosen := []string{}
	taken := map[string]bool{}
	add := func(id string) {
		if len(chosen) < size && !taken[id] {
			taken[id] = true
			chosen = append(chosen, id)
		}
	}
	for _, id := range mustInclude {
		add(id)
	}
	var cands []gpu
	for _, id := range available {
		if g, ok := p.byUUID[id]; ok && !taken[id] {
			cands = append(cands, g)
		}
	}
	node := -1
	for _, id := range mustInclude {
		if g, ok := p.byUUID[id]; ok && g.NUMA >= 0 {
			node = g.NUMA
			break
		}
	}
	if node < 0 {
		count := map[int]int{}
		for _, g := range cands {
			count[g.NUMA]++
		}
		best := -1
		for n, c := range count {
			if n >= 0 && (best < 0 || c > count[best] || (c == count[best] && n < best)) {
				best = n
			}
		}
		node = best
	}
	sort.SliceStable(cands, func(i, j int) bool {
		ai, aj := cands[i].NUMA == node, cands[j].NUMA == node
		if ai != aj {
			return ai
		}
		return cands[i].Index < cands[j].Index
	})
	for _, g := range cands {
		add(g.UUID)
	}
	return chosen
}

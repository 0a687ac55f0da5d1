package deviceplugin

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestDefaultAllocate: one response per container request with KDM_VISIBLE_DEVICES; an
// unknown ID is refused with InvalidArgument naming it.
func TestDefaultAllocate(t *testing.T) {
	p := startPlugin(t, Config{ResourceName: gpu, PluginDir: shortDir(t), Registration: NoRegistration, Devices: devices(pluginapi.Healthy, "a", "b", "c")})
	c := pluginClient(t, p.SocketPath())
	resp, err := c.Allocate(waitCtx(t), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"b", "a"}}, {DevicesIds: []string{"c"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{
		{Envs: map[string]string{"KDM_VISIBLE_DEVICES": "b,a"}},
		{Envs: map[string]string{"KDM_VISIBLE_DEVICES": "c"}},
	}}
	if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
		t.Fatalf("Allocate (-want +got):\n%s", diff)
	}
	_, err = c.Allocate(waitCtx(t), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"a", "gone"}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("Allocate of an unknown device = %v, want InvalidArgument naming it", err)
	}
}

// TestDefaultPreferred: must-include first, then available in order, no repeats, capped at
// the size.
func TestDefaultPreferred(t *testing.T) {
	for _, tc := range []struct {
		name        string
		avail, must []string
		size        int32
		want        []string
	}{
		{"available in order", []string{"c", "a", "b"}, nil, 2, []string{"c", "a"}},
		{"must-include first", []string{"a", "b", "c"}, []string{"c"}, 2, []string{"c", "a"}},
		{"no repeats", []string{"c", "a", "b"}, []string{"b", "c"}, 3, []string{"b", "c", "a"}},
		{"not enough", []string{"a"}, nil, 3, []string{"a"}},
		{"zero size", []string{"a"}, nil, 0, []string{}},
		{"must beyond size", nil, []string{"a", "b"}, 1, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := defaultPreferred(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
				{AvailableDeviceIDs: tc.avail, MustIncludeDeviceIDs: tc.must, AllocationSize: tc.size},
			}})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.ContainerResponses[0].DeviceIDs; !cmp.Equal(got, tc.want) {
				t.Fatalf("preferred %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCallbacks: configured callbacks answer the RPCs; a callback returning (nil, nil)
// becomes an Internal error; PreStartContainer defaults to an empty response.
func TestCallbacks(t *testing.T) {
	p := startPlugin(t, Config{ResourceName: gpu, PluginDir: shortDir(t), Registration: NoRegistration,
		Allocate: func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return nil, nil
		},
		GetPreferredAllocation: func(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
			return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: []string{"x"}}}}, nil
		},
	})
	c := pluginClient(t, p.SocketPath())
	if _, err := c.Allocate(waitCtx(t), &pluginapi.AllocateRequest{}); status.Code(err) != codes.Internal {
		t.Fatalf("Allocate with a (nil, nil) callback = %v, want Internal", err)
	}
	resp, err := c.GetPreferredAllocation(waitCtx(t), &pluginapi.PreferredAllocationRequest{})
	if err != nil || resp.ContainerResponses[0].DeviceIDs[0] != "x" {
		t.Fatalf("GetPreferredAllocation via callback = %v, %v", resp, err)
	}
	ps, err := c.PreStartContainer(waitCtx(t), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"a"}})
	if err != nil || ps == nil {
		t.Fatalf("default PreStartContainer = %v, %v", ps, err)
	}
}

package endpoint

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// manyDevices returns n devices with GPU-UUID-sized IDs, alternating health, on two NUMA nodes.
func manyDevices(n int) []*pluginapi.Device {
	devs := make([]*pluginapi.Device, n)
	for i := range devs {
		health := pluginapi.Healthy
		if i%7 == 0 {
			health = pluginapi.Unhealthy
		}
		devs[i] = &pluginapi.Device{
			ID:       fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", i, i),
			Health:   health,
			Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(i % 2)}}},
		}
	}
	return devs
}

func TestRunLargeMessage(t *testing.T) {
	const n = 100_000
	devs := manyDevices(n)
	msg := &pluginapi.ListAndWatchResponse{Devices: devs}
	if size := proto.Size(msg); size <= 4<<20 {
		t.Fatalf("test message is %d bytes; it must exceed gRPC's 4 MiB default to mean anything", size)
	}

	p := newStubPlugin()
	e := dialStub(t, p, Config{})
	lists, _ := startRun(t, context.Background(), e)
	send(t, p, devs...)
	got := nextList(t, lists)
	if len(got) != n {
		t.Fatalf("received %d devices, want %d", len(got), n)
	}
	for i, d := range got {
		// Field by field: proto.Equal on 100,000 messages is slow under -race.
		w := devs[i]
		if d.GetID() != w.ID || d.GetHealth() != w.Health ||
			len(d.GetTopology().GetNodes()) != 1 || d.GetTopology().GetNodes()[0].GetID() != w.Topology.Nodes[0].ID {
			t.Fatalf("device %d = %v, want %v", i, d, w)
		}
	}
}

// With gRPC's 4 MiB default the same list cannot be received: the reason for our default.
func TestRunLargeMessageOverLimit(t *testing.T) {
	p := newStubPlugin()
	p.listAndWatch = func(s pluginapi.DevicePlugin_ListAndWatchServer) error {
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: manyDevices(100_000)}); err != nil {
			return err
		}
		<-s.Context().Done()
		return nil
	}
	e := dialStub(t, p, Config{MaxRecvMsgSize: 4 << 20})
	lists, res := startRun(t, context.Background(), e)
	err := runReturned(t, res)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Run returned %v, want ResourceExhausted", err)
	}
	if len(lists) != 0 {
		t.Error("an oversized message reached the callback")
	}
}

func TestRunOddMessages(t *testing.T) {
	odd := []*pluginapi.Device{
		{ID: "nul\u0000id", Health: pluginapi.Healthy},
		{ID: "new\nline", Health: pluginapi.Unhealthy},
		{ID: "\ttab", Health: "Weird health string"},
		{ID: "", Health: ""},
	}
	p := newStubPlugin()
	e := dialStub(t, p, Config{})
	lists, _ := startRun(t, context.Background(), e)

	send(t, p, odd...)
	if diff := cmp.Diff(odd, nextList(t, lists), protocmp.Transform()); diff != "" {
		t.Errorf("odd IDs (-want +got):\n%s", diff)
	}
	send(t, p) // an empty list: every device gone
	if got := nextList(t, lists); len(got) != 0 {
		t.Errorf("empty list arrived as %v", got)
	}
	send(t, p, odd[0])
	if diff := cmp.Diff(odd[:1], nextList(t, lists), protocmp.Transform()); diff != "" {
		t.Errorf("list after the empty one (-want +got):\n%s", diff)
	}
}

package endpoint

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestRun(t *testing.T) {
	initial := []*pluginapi.Device{
		{ID: "ADeviceId", Health: pluginapi.Healthy},
		{ID: "AnotherDeviceId", Health: pluginapi.Healthy},
		{ID: "AThirdDeviceId", Health: pluginapi.Unhealthy},
	}
	updated := []*pluginapi.Device{
		{ID: "ADeviceId", Health: pluginapi.Unhealthy},
		{ID: "AThirdDeviceId", Health: pluginapi.Healthy},
		{ID: "AFourthDeviceId", Health: pluginapi.Healthy,
			Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: 1}}}},
	}
	p := newStubPlugin()
	e := dialStub(t, p, Config{})
	lists, res := startRun(t, context.Background(), e)

	send(t, p, initial...)
	if diff := cmp.Diff(initial, nextList(t, lists), protocmp.Transform()); diff != "" {
		t.Errorf("initial list (-want +got):\n%s", diff)
	}
	send(t, p, updated...)
	if diff := cmp.Diff(updated, nextList(t, lists), protocmp.Transform()); diff != "" {
		t.Errorf("update (-want +got):\n%s", diff)
	}

	close(p.updates) // the plugin ends the stream cleanly
	err := runReturned(t, res)
	if !errors.Is(err, io.EOF) {
		t.Errorf("Run returned %v, want io.EOF", err)
	}
	if e.IsStopped() {
		t.Error("Run marked the endpoint stopped; that is the owner's decision")
	}
	if len(lists) != 0 {
		t.Errorf("%d unexpected extra callbacks", len(lists))
	}
}

func TestRunEndsOnContextCancel(t *testing.T) {
	p := newStubPlugin()
	e := dialStub(t, p, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	lists, res := startRun(t, ctx, e)
	send(t, p, &pluginapi.Device{ID: "a", Health: pluginapi.Healthy})
	nextList(t, lists)

	cancel()
	if err := runReturned(t, res); !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
	if e.IsStopped() {
		t.Error("cancelling Run stopped the endpoint")
	}
}

func TestRunEndsOnStop(t *testing.T) {
	p := newStubPlugin()
	e := dialStub(t, p, Config{})
	lists, res := startRun(t, context.Background(), e)
	send(t, p, &pluginapi.Device{ID: "a", Health: pluginapi.Healthy})
	nextList(t, lists)

	e.Stop()
	if err := runReturned(t, res); !errors.Is(err, ErrStopped) {
		t.Errorf("Run returned %v, want ErrStopped", err)
	}
	if err := e.Run(context.Background(), func([]*pluginapi.Device) {}); !errors.Is(err, ErrStopped) {
		t.Errorf("Run on a stopped endpoint returned %v, want ErrStopped", err)
	}
}

// The plugin process dies: the server goes away and Run reports the stream error.
func TestRunEndsWhenPluginGoesAway(t *testing.T) {
	p := newStubPlugin()
	p.listAndWatch = func(s pluginapi.DevicePlugin_ListAndWatchServer) error {
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: []*pluginapi.Device{{ID: "a", Health: pluginapi.Healthy}}}); err != nil {
			return err
		}
		return errors.New("plugin crashed")
	}
	e := dialStub(t, p, Config{})
	lists, res := startRun(t, context.Background(), e)
	nextList(t, lists)
	err := runReturned(t, res)
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, ErrStopped) {
		t.Errorf("Run returned %v, want the stream's error", err)
	}
}

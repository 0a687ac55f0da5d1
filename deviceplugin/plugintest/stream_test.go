package plugintest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
)

// TestDropStreams: DropStreams ends every open stream with Unavailable; the plugin keeps
// serving and a new stream starts from the current list.
func TestDropStreams(t *testing.T) {
	p := startPlugin(t, deviceplugin.Config{ResourceName: gpu, PluginDir: shortDir(t), Registration: deviceplugin.NoRegistration, Devices: devices(pluginapi.Healthy, "a")})
	client := pluginClient(t, p.SocketPath())
	var streams []pluginapi.DevicePlugin_ListAndWatchClient
	for range 2 {
		s, err := client.ListAndWatch(waitCtx(t), &pluginapi.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		recv(t, s)
		streams = append(streams, s)
	}
	p.DropStreams()
	for i, s := range streams {
		if _, err := s.Recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("stream %d after DropStreams: Recv = %v, want Unavailable", i+1, err)
		}
	}
	if n := p.OpenStreams(); n != 0 {
		t.Fatalf("OpenStreams() = %d after DropStreams", n)
	}
	if err := p.SetHealth("a", pluginapi.Unhealthy); err != nil {
		t.Fatal(err)
	}
	s, err := client.ListAndWatch(waitCtx(t), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if got := recv(t, s); !cmp.Equal(got, []string{"a=Unhealthy"}) {
		t.Fatalf("new stream after a drop: %v", got)
	}
	if err := p.WaitForStreams(waitCtx(t), 3); err != nil {
		t.Fatal(err)
	}
}

package deviceplugin

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestListAndWatchOrder: a stream gets the current list, then one message per SetDevices or
// SetHealth, in call order, none merged; a later stream starts from the current list.
func TestListAndWatchOrder(t *testing.T) {
	dir := shortDir(t)
	p := startPlugin(t, Config{ResourceName: gpu, PluginDir: dir, Registration: NoRegistration, Devices: devices(pluginapi.Healthy, "a", "b")})
	client := pluginClient(t, p.SocketPath())
	s, err := client.ListAndWatch(waitCtx(t), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	// The stream's first message is the list as it was when the stream opened. It is read
	// first: the test's stream counter counts the stream before the plugin has taken that list,
	// so an update made right after the count could come before it.
	if got, want := recv(t, s), []string{"a=Healthy", "b=Healthy"}; !cmp.Equal(got, want) {
		t.Fatalf("the stream's first message = %v, want the list at its opening %v", got, want)
	}
	// All updates are queued before the client reads any of them: none may be lost or merged.
	p.SetHealth("b", pluginapi.Unhealthy)
	p.SetDevices(devices(pluginapi.Healthy, "c"))
	p.SetDevices(append(devices(pluginapi.Healthy, "c"), nil, &pluginapi.Device{ID: "d", Health: pluginapi.Unhealthy}))
	if err := p.SetHealth("c", pluginapi.Unhealthy); err != nil {
		t.Fatal(err)
	}
	err = p.SetHealth("zz", pluginapi.Unhealthy)
	if !errors.Is(err, ErrUnknownDevice) || !strings.Contains(err.Error(), `"zz"`) {
		t.Fatalf("SetHealth of an unknown ID = %v, want ErrUnknownDevice naming it", err)
	}
	want := [][]string{
		{"a=Healthy", "b=Unhealthy"},
		{"c=Healthy"},
		{"c=Healthy", "d=Unhealthy"},
		{"c=Unhealthy", "d=Unhealthy"},
	}
	for i, w := range want {
		if got := recv(t, s); !cmp.Equal(got, w) {
			t.Fatalf("message %d = %v, want %v", i, got, w)
		}
	}

	s2, err := client.ListAndWatch(waitCtx(t), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if got := recv(t, s2); !cmp.Equal(got, want[len(want)-1]) {
		t.Fatalf("second stream's first message = %v, want the current list", got)
	}
	// Both open streams get the next update.
	p.SetDevices(devices(pluginapi.Healthy, "e"))
	for i, st := range []pluginapi.DevicePlugin_ListAndWatchClient{s, s2} {
		if got := recv(t, st); !cmp.Equal(got, []string{"e=Healthy"}) {
			t.Fatalf("stream %d update = %v", i+1, got)
		}
	}
	if n := p.obs.count("ListAndWatch"); n != 2 {
		t.Fatalf("ListAndWatch count = %d, want 2", n)
	}
}

// TestDevicesIsACopy: neither the Config's devices nor Devices()' result alias the plugin's
// list.
func TestDevicesIsACopy(t *testing.T) {
	devs := devices(pluginapi.Healthy, "a")
	p := newPlugin(t, Config{ResourceName: gpu, PluginDir: shortDir(t), Devices: devs})
	devs[0].Health = pluginapi.Unhealthy
	got := p.Devices()
	if got[0].Health != pluginapi.Healthy {
		t.Fatalf("New kept the caller's device")
	}
	got[0].ID = "changed"
	if p.Devices()[0].ID != "a" {
		t.Fatalf("Devices() returned the plugin's own device")
	}
}

package deviceplugin

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func startWatcherPlugin(t *testing.T) *observedPlugin {
	t.Helper()
	dir := shortDir(t)
	p := startPlugin(t, Config{ResourceName: gpu, PluginDir: dir, SocketName: "gpu.sock", Registration: PluginWatcher,
		WatcherDir: filepath.Join(dir, "reg"), Devices: devices(pluginapi.Healthy, "a")})
	if got, want := p.RegistrySocketPath(), filepath.Join(dir, "reg", "gpu.sock"); got != want {
		t.Fatalf("RegistrySocketPath() = %q, want %q", got, want)
	}
	return p
}

// TestPluginWatcherMode: no Register call; GetInfo describes the plugin as the kubelet's
// plugin watcher expects; NotifyRegistrationStatus is recorded and a positive one counts as
// a registration.
func TestPluginWatcherMode(t *testing.T) {
	dir := shortDir(t)
	k := startFakeKubelet(t, filepath.Join(dir, "kubelet.sock"), false)
	p := startPlugin(t, Config{ResourceName: gpu, PluginDir: dir, SocketName: "gpu.sock", Registration: PluginWatcher,
		WatcherDir: filepath.Join(dir, "reg")})
	reg := registerapi.NewRegistrationClient(dial(t, p.RegistrySocketPath()))

	info, err := reg.GetInfo(waitCtx(t), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &registerapi.PluginInfo{Type: "DevicePlugin", Name: gpu, Endpoint: filepath.Join(dir, "gpu.sock"), SupportedVersions: []string{"v1beta1"}}
	if diff := cmp.Diff(want, info, protocmp.Transform()); diff != "" {
		t.Fatalf("GetInfo (-want +got):\n%s", diff)
	}
	if !filepath.IsAbs(info.Endpoint) {
		t.Fatalf("GetInfo endpoint %q is not absolute", info.Endpoint)
	}
	// The endpoint named by GetInfo serves the DevicePlugin service.
	if _, err := pluginClient(t, info.Endpoint).GetDevicePluginOptions(waitCtx(t), &pluginapi.Empty{}); err != nil {
		t.Fatalf("GetDevicePluginOptions on the GetInfo endpoint: %v", err)
	}

	statuses := []*registerapi.RegistrationStatus{{PluginRegistered: false, Error: "boom"}, {PluginRegistered: true}}
	for _, st := range statuses {
		if _, err := reg.NotifyRegistrationStatus(waitCtx(t), st); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.WaitForRegistrations(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(statuses, p.RegistrationStatuses(), protocmp.Transform()); diff != "" {
		t.Fatalf("recorded statuses (-want +got):\n%s", diff)
	}
	if n := p.Registrations(); n != 1 {
		t.Fatalf("Registrations() = %d, want 1 (only the positive status counts)", n)
	}
	if n := p.obs.count("GetInfo"); n != 1 {
		t.Fatalf("GetInfo count = %d, want 1", n)
	}
	select {
	case req := <-k.Got:
		t.Fatalf("PluginWatcher mode called Register: %v", req)
	default:
	}
}

// TestPluginWatcherSocketRecreated: when the plugin socket is deleted, the plugin serves it
// again and then re-creates its registry socket, so a watcher sees a new socket appear.
func TestPluginWatcherSocketRecreated(t *testing.T) {
	p := startWatcherPlugin(t)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(filepath.Dir(p.RegistrySocketPath())); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p.SocketPath()); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(waitTimeout)
	for created := false; !created; {
		select {
		case ev := <-w.Events:
			created = ev.Name == p.RegistrySocketPath() && ev.Has(fsnotify.Create)
		case err := <-w.Errors:
			t.Fatal(err)
		case <-deadline:
			t.Fatal("registry socket was not re-created")
		}
	}
	// The Create event comes at bind(), just before listen(): wait for ready, as watchers do.
	reg := registerapi.NewRegistrationClient(dial(t, p.RegistrySocketPath()))
	info, err := reg.GetInfo(waitCtx(t), &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	s, err := pluginClient(t, info.Endpoint).ListAndWatch(waitCtx(t), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if got := recv(t, s); !cmp.Equal(got, []string{"a=Healthy"}) {
		t.Fatalf("ListAndWatch on the re-created socket: %v", got)
	}
}

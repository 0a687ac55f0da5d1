package deviceplugin

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestNewDefaults: the default paths follow the kubelet's layout and the socket name is
// derived from the resource name.
func TestNewDefaults(t *testing.T) {
	p, err := New(Config{ResourceName: gpu})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.SocketPath(), "/var/lib/kubelet/device-plugins/example.com_gpu.sock"; got != want {
		t.Fatalf("SocketPath() = %q, want %q", got, want)
	}
	if got, want := p.cfg.KubeletSocket, pluginapi.KubeletSocket; got != want {
		t.Fatalf("KubeletSocket = %q, want %q", got, want)
	}
	if p.cfg.RegisterTimeout != DefaultRegisterTimeout || p.cfg.Version != pluginapi.Version || p.RegistrySocketPath() != "" {
		t.Fatalf("defaults not applied: %+v", p.cfg)
	}
	p.Stop() // never started: a no-op
}

// TestLifecycle: Start twice, Stop before Start, Stop twice and concurrently, Start after
// Stop; Stop ends open streams, removes the socket, and wakes waiters.
func TestLifecycle(t *testing.T) {
	unstarted := newPlugin(t, Config{ResourceName: gpu, PluginDir: shortDir(t)})
	unstarted.Stop()
	unstarted.Stop()
	if err := unstarted.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}

	p := startPlugin(t, Config{ResourceName: gpu, PluginDir: shortDir(t), Registration: NoRegistration, Devices: devices(pluginapi.Healthy, "a")})
	if err := p.Start(context.Background()); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("second Start = %v, want ErrAlreadyStarted", err)
	}
	s, err := pluginClient(t, p.SocketPath()).ListAndWatch(waitCtx(t), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, s)
	waitErr := make(chan error, 1)
	go func() { waitErr <- p.WaitForRegistrations(waitCtx(t), 1) }()

	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Stop()
		}()
	}
	wg.Wait()
	if _, err := s.Recv(); err == nil {
		t.Fatal("stream still open after Stop")
	}
	if _, err := os.Stat(p.SocketPath()); !os.IsNotExist(err) {
		t.Fatalf("socket left behind after Stop (stat: %v)", err)
	}
	select {
	case err := <-waitErr:
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("WaitForRegistrations across Stop = %v, want ErrStopped", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("WaitForRegistrations not woken by Stop")
	}
}

// TestStartRemovesStaleSocket: a socket left behind by a process that has exited (it
// refuses connections) is removed, and the plugin serves on the same path.
func TestStartRemovesStaleSocket(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "gpu.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the stale socket is gone before the test: %v", err)
	}
	p := startPlugin(t, Config{ResourceName: gpu, PluginDir: dir, SocketName: "gpu.sock", Registration: NoRegistration})
	// The stale socket refused connections; an answer comes from the plugin's own.
	if _, err := pluginClient(t, p.SocketPath()).GetDevicePluginOptions(waitCtx(t), &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}
}

// TestStartRefusesLiveSocket: a second plugin (another resource) given the socket name of a
// running one refuses to start, naming the path, and leaves the first one's socket in
// place: it keeps answering new connections and its open stream.
func TestStartRefusesLiveSocket(t *testing.T) {
	dir := shortDir(t)
	first := startPlugin(t, Config{ResourceName: gpu, PluginDir: dir, SocketName: "gpu.sock", Registration: NoRegistration,
		Devices: devices(pluginapi.Healthy, "a")})
	served, err := os.Lstat(first.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	s, err := pluginClient(t, first.SocketPath()).ListAndWatch(waitCtx(t), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, s)

	second := newPlugin(t, Config{ResourceName: "example.com/other", PluginDir: dir, SocketName: "gpu.sock", Registration: NoRegistration})
	err = second.Start(context.Background())
	if !errors.Is(err, ErrSocketInUse) || !strings.Contains(err.Error(), first.SocketPath()) {
		t.Fatalf("second Start on a live socket = %v, want ErrSocketInUse naming %s", err, first.SocketPath())
	}
	second.Stop()
	if now, err := os.Lstat(first.SocketPath()); err != nil || !os.SameFile(served, now) {
		t.Fatalf("the live plugin's socket was removed or replaced (stat: %v)", err)
	}
	if _, err := pluginClient(t, first.SocketPath()).GetDevicePluginOptions(waitCtx(t), &pluginapi.Empty{}); err != nil {
		t.Fatalf("the first plugin no longer answers on its socket: %v", err)
	}
	if err := first.SetHealth("a", pluginapi.Unhealthy); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, s); len(got) != 1 || got[0] != "a=Unhealthy" {
		t.Fatalf("the first plugin's stream after the refused start sent %v", got)
	}
}

// TestStartKeepsOtherFiles: a regular file, a symbolic link (even to a stale socket) or a
// directory at the socket path is never deleted; Start fails with ErrNotSocket.
func TestStartKeepsOtherFiles(t *testing.T) {
	for name, plant := range map[string]func(path string) error{
		"regular file": func(path string) error { return os.WriteFile(path, []byte("keep me"), 0o600) },
		"directory":    func(path string) error { return os.Mkdir(path, 0o700) },
		"symlink": func(path string) error {
			target := path + ".target"
			l, err := net.ListenUnix("unix", &net.UnixAddr{Name: target, Net: "unix"})
			if err != nil {
				return err
			}
			l.SetUnlinkOnClose(false)
			_ = l.Close()
			return os.Symlink(target, path)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := shortDir(t)
			path := filepath.Join(dir, "gpu.sock")
			if err := plant(path); err != nil {
				t.Fatal(err)
			}
			before, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			p := newPlugin(t, Config{ResourceName: gpu, PluginDir: dir, SocketName: "gpu.sock", Registration: NoRegistration})
			if err := p.Start(context.Background()); !errors.Is(err, ErrNotSocket) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Start over a %s = %v, want ErrNotSocket naming %s", name, err, path)
			}
			if now, err := os.Lstat(path); err != nil || !os.SameFile(before, now) {
				t.Fatalf("the %s at the socket path was removed or replaced (stat: %v)", name, err)
			}
		})
	}
}

// TestRemoveOnlyOurSocket: a socket file replaced by someone else is not deleted.
func TestRemoveOnlyOurSocket(t *testing.T) {
	path := filepath.Join(shortDir(t), "s.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	defer func() { _ = l.Close() }()
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	s := &servedSocket{path: path, l: l, info: info}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	other, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close() }()
	if err := s.removeIfOurs(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("another process's socket was deleted: %v", err)
	}
}

// TestRun: Run registers, returns nil when ctx ends, and leaves nothing behind; it also
// returns when someone else stops the plugin.
func TestRun(t *testing.T) {
	dir := shortDir(t)
	k := startFakeKubelet(t, filepath.Join(dir, "kubelet.sock"), true)
	p := newPlugin(t, Config{ResourceName: gpu, PluginDir: dir})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	k.Next(t)
	if err := p.WaitForRegistrations(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after ctx ended")
	}
	if _, err := os.Stat(p.SocketPath()); !os.IsNotExist(err) {
		t.Fatalf("socket left behind after Run (stat: %v)", err)
	}

	q := newPlugin(t, Config{ResourceName: gpu, PluginDir: dir, SocketName: "q.sock"})
	go func() { done <- q.Run(context.Background()) }()
	if err := q.WaitForRegistrations(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	q.Stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after Stop")
	}
}

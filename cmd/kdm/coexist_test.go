package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kdm-project/kdm/agent"
)

// listenUnix serves a unix socket at path until the test ends.
func listenUnix(t *testing.T, path string) *net.UnixListener {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestCheckSocketsFree: a live listener is refused and named; a stale socket file (its
// listener gone, the file left behind), a missing file and a regular file are not.
func TestCheckSocketsFree(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.sock")
	listenUnix(t, live)

	stale := filepath.Join(dir, "stale.sock")
	l := listenUnix(t, stale)
	l.SetUnlinkOnClose(false)
	_ = l.Close()
	if _, err := os.Lstat(stale); err != nil {
		t.Fatalf("the stale socket file should stay: %v", err)
	}
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	if err := checkSocketsFree(stale, filepath.Join(dir, "missing.sock"), regular); err != nil {
		t.Errorf("stale, missing and regular files: %v; want nil", err)
	}
	err := checkSocketsFree(stale, live)
	if !errors.Is(err, ErrSocketInUse) || !strings.Contains(err.Error(), live) {
		t.Errorf("live socket: %v; want ErrSocketInUse naming %s", err, live)
	}
}

// TestRunRefusesBesideALiveDeviceManager: `kdm run` exits 1 without touching the directory
// when another process serves kubelet.sock there, and names the socket; the other process's
// socket keeps working.
func TestRunRefusesBesideALiveDeviceManager(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "kubelet.sock")
	listenUnix(t, sock)
	var out, errOut bytes.Buffer
	code := run([]string{"run", "--root-dir", dir, "--device-plugin-dir", dir, "--healthz-bind-address", ""}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "refusing to start") || !strings.Contains(errOut.String(), sock) {
		t.Fatalf("kdm run beside a live kubelet.sock: exit %d, stderr %q; want exit 1 naming %s", code, errOut.String(), sock)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("the other process's socket no longer answers: %v", err)
	}
	_ = c.Close()
}

// TestServedSockets: the sockets checked are the kubelet's, at the kubelet's default paths
// unless the directories are given.
func TestServedSockets(t *testing.T) {
	for _, tc := range []struct {
		cfg  agent.Config
		want []string
	}{
		{agent.Config{}, []string{"/var/lib/kubelet/device-plugins/kubelet.sock", "/var/lib/kubelet/pod-resources/kubelet.sock"}},
		{agent.Config{RootDir: "/r", DevicePluginDir: "/dp"}, []string{"/dp/kubelet.sock", "/r/pod-resources/kubelet.sock"}},
	} {
		if got := servedSockets(tc.cfg); !slices.Equal(got, tc.want) {
			t.Errorf("servedSockets(root %q, plugins %q) = %v, want %v", tc.cfg.RootDir, tc.cfg.DevicePluginDir, got, tc.want)
		}
	}
}

// TestRunExplainsHealthzPortInUse: when the healthz address is taken (by default a kubelet's
// 10248), `kdm run` exits 1 and says which flag moves it.
func TestRunExplainsHealthzPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	code := run([]string{"run", "--root-dir", dir, "--device-plugin-dir", dir, "--healthz-bind-address", l.Addr().String()}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "address already in use") || !strings.Contains(errOut.String(), "--healthz-port") {
		t.Fatalf("kdm run with its healthz address taken: exit %d, stderr %q; want exit 1 naming --healthz-port", code, errOut.String())
	}
}

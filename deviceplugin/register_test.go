package deviceplugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	testingclock "k8s.io/utils/clock/testing"
)

// TestRegisterRequest: Start makes one Register call carrying the API version, the socket's
// file name, the resource name and the options, while the socket is already served.
func TestRegisterRequest(t *testing.T) {
	dir := shortDir(t)
	k := startFakeKubelet(t, filepath.Join(dir, "kubelet.sock"), true)
	opts := &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}
	p := startPlugin(t, Config{ResourceName: gpu, PluginDir: dir, Options: opts, Devices: devices(pluginapi.Healthy, "a")})

	want := &pluginapi.RegisterRequest{Version: "v1beta1", Endpoint: "example.com_gpu.sock", ResourceName: gpu, Options: opts}
	if diff := cmp.Diff(want, k.Next(t), protocmp.Transform()); diff != "" {
		t.Fatalf("Register request (-want +got):\n%s", diff)
	}
	if got := p.Registrations(); got != 1 {
		t.Fatalf("Registrations() = %d, want 1", got)
	}
	if got, want := p.SocketPath(), filepath.Join(dir, "example.com_gpu.sock"); got != want {
		t.Fatalf("SocketPath() = %q, want %q", got, want)
	}
	if n := p.obs.count("GetDevicePluginOptions"); n != 1 {
		t.Fatalf("GetDevicePluginOptions calls = %d, want 1 (the fake kubelet's dial-back)", n)
	}
	got, err := pluginClient(t, p.SocketPath()).GetDevicePluginOptions(waitCtx(t), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(opts, got, protocmp.Transform()); diff != "" {
		t.Fatalf("served options (-want +got):\n%s", diff)
	}
}

// TestStartRegistrationError: a Register refused by the kubelet fails Start with the
// kubelet's error, stops the plugin and removes its socket.
func TestStartRegistrationError(t *testing.T) {
	dir := shortDir(t)
	k := startFakeKubelet(t, filepath.Join(dir, "kubelet.sock"), false)
	k.SetErr(status.Error(codes.InvalidArgument, `invalid version "v1beta1"`))
	p := newPlugin(t, Config{ResourceName: gpu, PluginDir: dir})
	err := p.Start(context.Background())
	if !errors.Is(err, ErrRegistration) || status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `invalid version "v1beta1"`) {
		t.Fatalf("Start = %v, want ErrRegistration wrapping the kubelet's InvalidArgument", err)
	}
	if _, err := os.Stat(p.SocketPath()); !os.IsNotExist(err) {
		t.Fatalf("socket still present after a failed Start (stat: %v)", err)
	}
	if err := p.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after a failed Start = %v, want ErrStopped", err)
	}
	if p.Registrations() != 0 {
		t.Fatalf("Registrations() = %d after a refusal, want 0", p.Registrations())
	}
}

// TestStartWithoutKubelet: with no kubelet.sock, Register gives up at RegisterTimeout and
// Start fails.
func TestStartWithoutKubelet(t *testing.T) {
	dir := shortDir(t)
	p := newPlugin(t, Config{ResourceName: gpu, PluginDir: dir, RegisterTimeout: 100 * time.Millisecond})
	if err := p.Start(context.Background()); !errors.Is(err, ErrRegistration) || status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Start without a kubelet = %v, want ErrRegistration with DeadlineExceeded", err)
	}
}

// restartKubelet stops k (its socket file disappears) and, after removing also
// toDelete (the manager's cleanup of plugin sockets), starts a new fake kubelet on the same path.
func restartKubelet(t *testing.T, k *fakeKubelet, toDelete ...string) *fakeKubelet {
	t.Helper()
	k.Stop()
	for _, f := range toDelete {
		if err := os.Remove(f); err != nil {
			t.Fatalf("cleanup of %s: %v", f, err)
		}
	}
	return startFakeKubelet(t, k.Path, true)
}

// TestReRegisterOnKubeletRestart: each time kubelet.sock is created again the plugin
// registers by itself, including when the "kubelet" first deleted the plugin's socket: the
// plugin serves it again before registering (the fake kubelet dials back and would refuse).
func TestReRegisterOnKubeletRestart(t *testing.T) {
	for _, deleteOwn := range []bool{false, true} {
		t.Run(map[bool]string{false: "kubelet.sock only", true: "plugin socket deleted first"}[deleteOwn], func(t *testing.T) {
			dir := shortDir(t)
			k := startFakeKubelet(t, filepath.Join(dir, "kubelet.sock"), true)
			p := startPlugin(t, Config{ResourceName: gpu, PluginDir: dir, SocketName: "gpu.sock", Devices: devices(pluginapi.Healthy, "a")})
			k.Next(t)
			for round := 2; round <= 3; round++ {
				var del []string
				if deleteOwn {
					del = append(del, p.SocketPath())
				}
				k = restartKubelet(t, k, del...)
				if req := k.Next(t); req.Endpoint != "gpu.sock" || req.ResourceName != gpu {
					t.Fatalf("round %d: re-registration request %v", round, req)
				}
				if err := p.WaitForRegistrations(waitCtx(t), round); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if fi, err := os.Stat(p.SocketPath()); err != nil || fi.Mode()&os.ModeSocket == 0 {
					t.Fatalf("round %d: plugin socket not served again (stat %v, %v)", round, fi, err)
				}
			}
			// The re-created socket serves the same plugin.
			s, err := pluginClient(t, p.SocketPath()).ListAndWatch(waitCtx(t), &pluginapi.Empty{})
			if err != nil {
				t.Fatal(err)
			}
			if got := recv(t, s); !cmp.Equal(got, []string{"a=Healthy"}) {
				t.Fatalf("ListAndWatch on the re-created socket: %v", got)
			}
		})
	}
}

// TestReRegisterRetriesWithBackoff: a refused re-registration is retried after the backoff
// (on the fake clock) and counts only once it succeeds.
func TestReRegisterRetriesWithBackoff(t *testing.T) {
	dir := shortDir(t)
	clk := testingclock.NewFakeClock(time.Now())
	k := startFakeKubelet(t, filepath.Join(dir, "kubelet.sock"), true)
	p := startPlugin(t, Config{ResourceName: gpu, PluginDir: dir, Clock: clk, RetryBackoff: time.Second, MaxRetryBackoff: 4 * time.Second})
	k.Next(t)

	k.Stop()
	k = startFakeKubelet(t, k.Path, true)
	k.SetErr(status.Error(codes.Unavailable, "not ready yet"))
	for attempt := 1; attempt <= 3; attempt++ {
		k.Next(t)
		waitForTimer(t, clk)
		if got := p.Registrations(); got != 1 {
			t.Fatalf("Registrations() = %d after %d refused attempts, want 1", got, attempt)
		}
		if attempt == 3 {
			k.SetErr(nil)
		}
		clk.Step(4 * time.Second) // the largest backoff
	}
	k.Next(t)
	if err := p.WaitForRegistrations(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}
}

// waitForTimer waits until something sleeps on the fake clock. There is no event for that,
// so this checks with a short pause, bounded by waitTimeout.
func waitForTimer(t *testing.T, clk *testingclock.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the plugin never waited on the clock")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestKubeletSocketElsewhere: KubeletSocket outside PluginDir is watched too.
func TestKubeletSocketElsewhere(t *testing.T) {
	dir := shortDir(t)
	kdir := filepath.Join(dir, "k")
	if err := os.Mkdir(kdir, 0o750); err != nil {
		t.Fatal(err)
	}
	k := startFakeKubelet(t, filepath.Join(kdir, "kubelet.sock"), false)
	p := startPlugin(t, Config{ResourceName: gpu, PluginDir: dir, KubeletSocket: k.Path})
	k.Next(t)
	k.Stop()
	startFakeKubelet(t, k.Path, false).Next(t)
	if err := p.WaitForRegistrations(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}
}

// TestKeepRegistering: with KeepRegistering, a first registration that fails does not stop the
// plugin; it registers once a kubelet appears.
func TestKeepRegistering(t *testing.T) {
	dir := shortDir(t)
	p := newPlugin(t, Config{ResourceName: gpu, PluginDir: dir, RegisterTimeout: 100 * time.Millisecond,
		RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 20 * time.Millisecond, KeepRegistering: true})
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start without a kubelet, KeepRegistering: %v", err)
	}
	startFakeKubelet(t, filepath.Join(dir, "kubelet.sock"), false)
	if err := p.WaitForRegistrations(waitCtx(t), 1); err != nil {
		t.Fatalf("plugin did not register once the kubelet appeared: %v", err)
	}
}

package devicemanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
	"github.com/kdm-project/kdm/endpoint"
)

const gpu = "example.com/gpu"

func TestNewManagerImpl(t *testing.T) {
	if _, err := New(Config{PluginDir: shortDir(t)}); err != nil {
		t.Fatalf("New on an absolute dir: %v", err)
	}
	_, err := New(Config{PluginDir: "relative/dir"})
	if err == nil || !strings.Contains(err.Error(), "bad socketPath, must be an absolute path: relative/dir/kubelet.sock") {
		t.Fatalf("New on a relative dir: got %v, want the kubelet's bad socketPath error", err)
	}
}

func TestStartStop(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	if fi, err := os.Stat(m.SocketPath()); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("kubelet.sock not a socket after Start: %v", err)
	}
	testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "a", "b"))
	waitFor(t, m, "plugin devices", func() bool { return capacityIs(m, gpu, 2, 2) })
	if err := m.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := m.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := os.Stat(m.SocketPath()); !os.IsNotExist(err) {
		t.Fatalf("kubelet.sock still present after Stop: %v", err)
	}
	// Stop disconnects: all devices unhealthy, capacity kept for the grace period.
	if !capacityIs(m, gpu, 2, 0) {
		c, a, _ := m.GetCapacity()
		t.Fatalf("after Stop: capacity %v allocatable %v, want 2/0", c, a)
	}
	unstarted, _ := New(Config{PluginDir: shortDir(t)})
	if err := unstarted.Stop(); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
}

// TestStopRightAfterStartIsClean: a Stop that comes before the registration server began
// serving is a clean stop: no error is logged and none is kept for the health checks.
func TestStopRightAfterStartIsClean(t *testing.T) {
	var errorsLogged atomic.Int64
	logger := funcr.New(func(_, args string) {
		if strings.Contains(args, `"error"=`) || strings.Contains(args, `"err"=`) {
			errorsLogged.Add(1)
		}
	}, funcr.Options{})
	dir := shortDir(t)
	for range 30 {
		m, err := New(Config{PluginDir: dir, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(context.Background(), Sources{}); err != nil {
			t.Fatal(err)
		}
		if err := m.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		m.mu.Lock()
		serveErr := m.serveErr
		m.mu.Unlock()
		if serveErr != nil {
			t.Fatalf("a clean stop left a serve error: %v", serveErr)
		}
	}
	if n := errorsLogged.Load(); n != 0 {
		t.Fatalf("%d errors logged by 30 start-stop cycles, want none", n)
	}
}

func TestStartCleansSocketsOnly(t *testing.T) {
	dir := shortDir(t)
	stale := filepath.Join(dir, "stale.sock")
	lis := listenUnix(t, stale)
	_ = lis // left open: a stale plugin socket
	keep := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "subdir")
	if err := os.Mkdir(sub, 0o750); err != nil {
		t.Fatal(err)
	}
	testManager(t, dir, Config{}, Sources{})
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale socket survived Start: %v", err)
	}
	for _, p := range []string{keep, sub} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed by Start: %v", p, err)
		}
	}
}

func TestRegisterValidation(t *testing.T) {
	dir := shortDir(t)
	reg := prometheus.NewRegistry()
	m := testManager(t, dir, Config{Registerer: reg, Endpoint: endpoint.Config{DialTimeout: 500 * time.Millisecond}}, Sources{})
	client := registrationClient(t, m.SocketPath())
	cases := []struct {
		name string
		req  *pluginapi.RegisterRequest
		want string
	}{
		{"bad version", &pluginapi.RegisterRequest{Version: "v1alpha1", ResourceName: gpu, Endpoint: "x.sock"},
			`requested API version "v1alpha1" is not supported by kubelet. Supported version is ["v1beta1"]`},
		{"no domain", &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "gpu", Endpoint: "x.sock"},
			`the ResourceName "gpu" is invalid`},
		{"native", &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "kubernetes.io/gpu", Endpoint: "x.sock"},
			`the ResourceName "kubernetes.io/gpu" is invalid`},
		{"requests prefix", &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "requests.example.com/gpu", Endpoint: "x.sock"},
			`the ResourceName "requests.example.com/gpu" is invalid`},
		{"escaping endpoint", &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: gpu, Endpoint: "../x.sock"},
			`invalid endpoint "../x.sock"`},
		{"absolute endpoint", &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: gpu, Endpoint: "/x.sock"},
			`invalid endpoint "/x.sock"`},
		{"nobody listening", &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: gpu, Endpoint: "absent.sock"},
			"failed to dial device plugin"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.Register(context.Background(), tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Register: got %v, want error containing %q", err, tc.want)
			}
		})
	}
	// Every request counts, valid or not.
	if got := testutil.ToFloat64(m.metrics.registrations.WithLabelValues(gpu)); got != 4 {
		t.Errorf("kubelet_device_plugin_registration_total{resource_name=%q} = %v, want 4", gpu, got)
	}
	if n, err := testutil.GatherAndCount(reg, "kubelet_device_plugin_registration_total"); err != nil || n == 0 {
		t.Errorf("registration metric not registered on the given registry: %d, %v", n, err)
	}
	if _, ok := m.endpoints[gpu]; ok {
		t.Errorf("a failed registration left an endpoint")
	}
}

func TestRegisterEndpointWithoutSockSuffix(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	testPlugin(t, dir, gpu, "gpu-plugin", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "a"))
	waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, 1, 1) })
}

// TestRegisterOptionsHang: a plugin that hangs in GetDevicePluginOptions makes Register fail
// within the options deadline, and leaves no endpoint behind.
func TestRegisterOptionsHang(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{Endpoint: endpoint.Config{OptionsTimeout: 300 * time.Millisecond}}, Sources{})
	p, err := plugintest.New(deviceplugin.Config{ResourceName: gpu, PluginDir: dir, SocketName: "hang.sock",
		Devices: devices(pluginapi.Healthy, "a"), Registration: deviceplugin.NoRegistration})
	if err != nil {
		t.Fatal(err)
	}
	p.SetFaults(plugintest.Faults{HangOptions: true})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	client := registrationClient(t, m.SocketPath())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err = client.Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: gpu, Endpoint: "hang.sock"})
	if err == nil || !strings.Contains(err.Error(), "failed to get device plugin options") {
		t.Fatalf("Register against a hung plugin: got %v, want failed to get device plugin options", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("Register did not return before the test's own deadline")
	}
}

// TestDevicePluginReRegistration: for every option combination, a second instance with the same
// devices keeps the count, a third with one different device replaces the list.
func TestDevicePluginReRegistration(t *testing.T) {
	for _, preStart := range []bool{false, true} {
		for _, preferred := range []bool{false, true} {
			t.Run(fmt.Sprintf("preStart=%v,preferred=%v", preStart, preferred), func(t *testing.T) {
				testReRegistration(t, &pluginapi.DevicePluginOptions{PreStartRequired: preStart, GetPreferredAllocationAvailable: preferred}, false)
			})
		}
	}
}

func TestDevicePluginReRegistrationProbeMode(t *testing.T) {
	testReRegistration(t, &pluginapi.DevicePluginOptions{}, true)
}

func testReRegistration(t *testing.T, opts *pluginapi.DevicePluginOptions, probe bool) {
	dir := shortDir(t)
	cfg := Config{}
	var watch string
	if probe {
		watch = filepath.Join(dir, "plugins_registry")
		cfg.PluginWatcherDir = watch
	}
	m := testManager(t, dir, cfg, Sources{})
	mode := func(c *deviceplugin.Config) {
		if probe {
			c.Registration = deviceplugin.PluginWatcher
			c.WatcherDir = watch
		}
	}
	p1 := testPlugin(t, dir, gpu, "p1.sock", opts, devices(pluginapi.Healthy, "dev1", "dev2"), mode)
	waitFor(t, m, "first plugin", func() bool { return capacityIs(m, gpu, 2, 2) })

	p2 := testPlugin(t, dir, gpu, "p2.sock", opts, devices(pluginapi.Healthy, "dev1", "dev2"), mode)
	waitFor(t, m, "second plugin connected", func() bool { return m.currentSocket(gpu) == p2.SocketPath() })
	if !capacityIs(m, gpu, 2, 2) {
		t.Fatalf("capacity changed when an instance with the same devices registered")
	}
	p1.Stop() // the old instance going away must not disturb the new one
	p3 := testPlugin(t, dir, gpu, "p3.sock", opts, devices(pluginapi.Healthy, "dev3"), mode)
	waitFor(t, m, "third plugin's single device", func() bool { return capacityIs(m, gpu, 1, 1) })
	if got := m.currentSocket(gpu); got != p3.SocketPath() {
		t.Fatalf("current instance %q, want %q", got, p3.SocketPath())
	}
	if got := m.GetAllocatableDevices()[gpu]; len(got) != 1 || got["dev3"] == nil {
		t.Fatalf("allocatable devices %v, want only dev3", got)
	}
}

// currentSocket is the socket of the resource's current endpoint ("" if none).
func (m *Manager) currentSocket(res string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if info, ok := m.endpoints[res]; ok {
		return info.ep.SocketPath()
	}
	return ""
}

func registrationClient(t *testing.T, socket string) pluginapi.RegistrationClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pluginapi.NewRegistrationClient(conn)
}

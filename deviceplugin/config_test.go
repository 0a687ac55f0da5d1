package deviceplugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/internal/configtest"
)

// TestConfigValidate lists every value Config.Validate refuses, with the exact message, and
// values it must accept.
func TestConfigValidate(t *testing.T) {
	long := "/" + strings.Repeat("d", 100) // + "/example.com_gpu.sock" is 122 bytes
	longSock := long + "/example.com_gpu.sock"
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" for a valid config
	}{
		{"minimal", Config{ResourceName: gpu}, ""},
		{"everything set", Config{ResourceName: gpu, PluginDir: "/x", SocketName: "s.sock",
			KubeletSocket: "/k/kubelet.sock", Options: &pluginapi.DevicePluginOptions{PreStartRequired: true},
			Devices: devices(pluginapi.Healthy, "a", "a"), Registration: PluginWatcher, WatcherDir: "/w",
			RegisterTimeout: time.Second, KeepRegistering: true, RetryBackoff: time.Second,
			MaxRetryBackoff: time.Second, Version: "v1alpha1", Clock: clocktesting.NewFakeClock(time.Time{})}, ""},
		{"relative directories", Config{ResourceName: gpu, PluginDir: "plugins", KubeletSocket: "k.sock",
			Registration: PluginWatcher, WatcherDir: "watch"}, ""},
		{"long kubelet socket unused", Config{ResourceName: gpu, KubeletSocket: longSock, Registration: NoRegistration}, ""},
		{"long watcher dir unused", Config{ResourceName: gpu, WatcherDir: long}, ""},
		{"RetryBackoff above the default cap", Config{ResourceName: gpu, RetryBackoff: time.Hour}, ""},
		{"subdomain resource", Config{ResourceName: "gpu.vendor.example/a100-80gb"}, ""},

		{"no ResourceName", Config{},
			"deviceplugin: ResourceName must be set"},
		{"unqualified ResourceName", Config{ResourceName: "gpu"},
			`deviceplugin: ResourceName must be an extended resource name, got "gpu"`},
		{"native ResourceName", Config{ResourceName: "kubernetes.io/gpu"},
			`deviceplugin: ResourceName must be an extended resource name, got "kubernetes.io/gpu"`},
		{"native subdomain ResourceName", Config{ResourceName: "devices.kubernetes.io/gpu"},
			`deviceplugin: ResourceName must be an extended resource name, got "devices.kubernetes.io/gpu"`},
		{"quota ResourceName", Config{ResourceName: "requests.example.com/gpu"},
			`deviceplugin: ResourceName must be an extended resource name, got "requests.example.com/gpu"`},
		{"malformed ResourceName", Config{ResourceName: "example.com/g p u"},
			`deviceplugin: ResourceName must be an extended resource name, got "example.com/g p u"`},
		{"SocketName is a path", Config{ResourceName: gpu, SocketName: "a/b.sock"},
			`deviceplugin: SocketName must be a file name, not a path, got "a/b.sock"`},
		{"SocketName is dot", Config{ResourceName: gpu, SocketName: "."},
			`deviceplugin: SocketName must be a file name, not a path, got "."`},
		{"SocketName is dot-dot", Config{ResourceName: gpu, SocketName: ".."},
			`deviceplugin: SocketName must be a file name, not a path, got ".."`},
		{"socket path too long", Config{ResourceName: gpu, PluginDir: long, KubeletSocket: "/k.sock"},
			fmt.Sprintf(`deviceplugin: socket path %q (PluginDir + SocketName) must not be longer than 107 bytes, got 122`, longSock)},
		{"KubeletSocket too long", Config{ResourceName: gpu, KubeletSocket: longSock},
			fmt.Sprintf(`deviceplugin: KubeletSocket %q must not be longer than 107 bytes, got 122`, longSock)},
		{"nil devices", Config{ResourceName: gpu, Devices: []*pluginapi.Device{{ID: "a"}, nil, {ID: "b"}, nil}},
			"deviceplugin: Devices[1] must not be nil\ndeviceplugin: Devices[3] must not be nil"},
		{"unknown Registration", Config{ResourceName: gpu, Registration: 7},
			"deviceplugin: Registration must be RegisterWithKubelet, PluginWatcher or NoRegistration, got RegistrationMode(7)"},
		{"PluginWatcher without WatcherDir", Config{ResourceName: gpu, Registration: PluginWatcher},
			"deviceplugin: WatcherDir must be set in PluginWatcher mode"},
		{"registration socket path too long", Config{ResourceName: gpu, Registration: PluginWatcher, WatcherDir: long},
			fmt.Sprintf(`deviceplugin: registration socket path %q (WatcherDir + SocketName) must not be longer than 107 bytes, got 122`, longSock)},
		{"negative RegisterTimeout", Config{ResourceName: gpu, RegisterTimeout: -time.Second},
			"deviceplugin: RegisterTimeout must not be negative, got -1s"},
		{"negative RetryBackoff", Config{ResourceName: gpu, RetryBackoff: -time.Millisecond},
			"deviceplugin: RetryBackoff must not be negative, got -1ms"},
		{"negative MaxRetryBackoff", Config{ResourceName: gpu, MaxRetryBackoff: -time.Minute},
			"deviceplugin: MaxRetryBackoff must not be negative, got -1m0s"},
		{"MaxRetryBackoff below RetryBackoff", Config{ResourceName: gpu, RetryBackoff: 2 * time.Second, MaxRetryBackoff: time.Second},
			"deviceplugin: MaxRetryBackoff must not be shorter than RetryBackoff (2s), got 1s"},
		{"MaxRetryBackoff below the default RetryBackoff", Config{ResourceName: gpu, MaxRetryBackoff: 100 * time.Millisecond},
			"deviceplugin: MaxRetryBackoff must not be shorter than RetryBackoff (500ms), got 100ms"},
		{"all, in field order", Config{MaxRetryBackoff: -2, RetryBackoff: -2, RegisterTimeout: -2,
			Registration: PluginWatcher, Devices: []*pluginapi.Device{nil}, KubeletSocket: "relative.sock",
			SocketName: "../x.sock", PluginDir: "/x", ResourceName: "gpu"},
			`deviceplugin: ResourceName must be an extended resource name, got "gpu"` + "\n" +
				`deviceplugin: SocketName must be a file name, not a path, got "../x.sock"` + "\n" +
				"deviceplugin: Devices[0] must not be nil\n" +
				"deviceplugin: WatcherDir must be set in PluginWatcher mode\n" +
				"deviceplugin: RegisterTimeout must not be negative, got -2ns\n" +
				"deviceplugin: RetryBackoff must not be negative, got -2ns\n" +
				"deviceplugin: MaxRetryBackoff must not be negative, got -2ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			configtest.CheckError(t, err, tc.want)
			if tc.want == "" {
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("Validate() = %v, does not match ErrInvalidConfig", err)
			}
			p, newErr := New(tc.cfg)
			if newErr == nil || newErr.Error() != tc.want {
				t.Errorf("New() = %v, %v; want Validate's error", p, newErr)
			}
		})
	}
}

// TestConfigValidateChangesNothing: Validate leaves the Config as it was, defaults unapplied.
func TestConfigValidateChangesNothing(t *testing.T) {
	cfg := Config{ResourceName: gpu, PluginDir: "rel", Devices: devices(pluginapi.Healthy, "a")}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.PluginDir != "rel" || cfg.SocketName != "" || cfg.RegisterTimeout != 0 || cfg.Options != nil {
		t.Errorf("Validate changed the config: %+v", cfg)
	}
}

// TestNewAppliesDefaults: New fills in the documented defaults, makes paths absolute and
// keeps every value that is set.
func TestNewAppliesDefaults(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                 string
		cfg                  Config
		socket, kubelet      string
		first, limit, regTTL time.Duration
	}{
		{"zero", Config{ResourceName: gpu},
			"/var/lib/kubelet/device-plugins/example.com_gpu.sock", pluginapi.KubeletSocket,
			DefaultRetryBackoff, DefaultMaxRetryBackoff, DefaultRegisterTimeout},
		{"relative", Config{ResourceName: gpu, PluginDir: "plugins", SocketName: "s.sock"},
			filepath.Join(wd, "plugins", "s.sock"), filepath.Join(wd, "plugins", "kubelet.sock"),
			DefaultRetryBackoff, DefaultMaxRetryBackoff, DefaultRegisterTimeout},
		{"long first backoff caps itself", Config{ResourceName: gpu, PluginDir: "/p", RetryBackoff: time.Hour},
			"/p/example.com_gpu.sock", "/p/kubelet.sock", time.Hour, time.Hour, DefaultRegisterTimeout},
		{"set", Config{ResourceName: gpu, PluginDir: "/p", KubeletSocket: "/k/kubelet.sock",
			RetryBackoff: time.Second, MaxRetryBackoff: time.Minute, RegisterTimeout: 3 * time.Second},
			"/p/example.com_gpu.sock", "/k/kubelet.sock", time.Second, time.Minute, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if p.SocketPath() != tc.socket || p.cfg.KubeletSocket != tc.kubelet {
				t.Errorf("sockets = %q, %q; want %q, %q", p.SocketPath(), p.cfg.KubeletSocket, tc.socket, tc.kubelet)
			}
			if p.cfg.RetryBackoff != tc.first || p.cfg.MaxRetryBackoff != tc.limit || p.cfg.RegisterTimeout != tc.regTTL {
				t.Errorf("backoff %v..%v, register timeout %v; want %v..%v, %v",
					p.cfg.RetryBackoff, p.cfg.MaxRetryBackoff, p.cfg.RegisterTimeout, tc.first, tc.limit, tc.regTTL)
			}
			if p.cfg.Version != pluginapi.Version || p.cfg.Options == nil || p.cfg.Clock == nil || p.cfg.Logger.GetSink() == nil {
				t.Errorf("defaults not applied: %+v", p.cfg)
			}
		})
	}
}

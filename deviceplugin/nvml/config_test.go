package nvml

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/internal/configtest"
)

// TestConfigValidate lists every value Config.Validate refuses, with the exact message, and
// checks that New refuses it with the same error before it opens NVML (the cases name no
// mock, so a New that got as far would fail for want of libnvidia-ml instead).
func TestConfigValidate(t *testing.T) {
	long := "/" + strings.Repeat("d", 100)
	for _, tc := range []struct {
		name    string
		cfg     Config
		want    string // "" for a valid config
		fromSDK bool   // the error is the SDK's: it matches deviceplugin.ErrInvalidConfig
	}{
		{"zero", Config{}, "", false},
		{"mock", Config{Mock: MockDGXA100}, "", false},
		{"everything set", Config{Mock: MockDGXA100, ResourceName: "example.com/gpu", PluginDir: "/p",
			SocketName: "g.sock", KubeletSocket: "/k/kubelet.sock", CDI: true, SysfsRoot: "/s",
			HealthControlDir: "/h"}, "", false},

		{"mock of 12", Config{Mock: MockDGXA100, MockGPUs: 12}, "", false},
		{"MockGPUs without Mock", Config{MockGPUs: 4}, "nvml: MockGPUs (4) needs Mock", false},
		{"MockGPUs negative", Config{Mock: MockDGXA100, MockGPUs: -1}, "nvml: MockGPUs must be 0 (eight) or 1 to 64, got -1", false},
		{"MockGPUs too many", Config{Mock: MockDGXA100, MockGPUs: 65}, "nvml: MockGPUs must be 0 (eight) or 1 to 64, got 65", false},
		{"unknown Mock", Config{Mock: "dgx-nope"},
			`nvml: Mock must be "" (the real libnvidia-ml) or "dgxa100", got "dgx-nope"`, false},
		{"bad ResourceName", Config{ResourceName: "gpu"},
			`deviceplugin: ResourceName must be an extended resource name, got "gpu"`, true},
		{"SocketName is a path", Config{SocketName: "a/b.sock"},
			`deviceplugin: SocketName must be a file name, not a path, got "a/b.sock"`, true},
		{"socket path too long", Config{PluginDir: long, KubeletSocket: "/k.sock"},
			fmt.Sprintf("deviceplugin: socket path %q (PluginDir + SocketName) must not be longer than 107 bytes, got 117",
				long+"/"+DefaultSocketName), true},
		{"KubeletSocket too long", Config{KubeletSocket: long + "/kubelet.sock"},
			fmt.Sprintf("deviceplugin: KubeletSocket %q must not be longer than 107 bytes, got 114",
				long+"/kubelet.sock"), true},
		{"all, in field order", Config{SocketName: "..", ResourceName: "kubernetes.io/gpu", Mock: "x"},
			`nvml: Mock must be "" (the real libnvidia-ml) or "dgxa100", got "x"` + "\n" +
				`deviceplugin: ResourceName must be an extended resource name, got "kubernetes.io/gpu"` + "\n" +
				`deviceplugin: SocketName must be a file name, not a path, got ".."`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			configtest.CheckError(t, err, tc.want)
			if tc.want == "" {
				return
			}
			if got := errors.Is(err, deviceplugin.ErrInvalidConfig); got != tc.fromSDK {
				t.Errorf("errors.Is(err, deviceplugin.ErrInvalidConfig) = %v, want %v", got, tc.fromSDK)
			}
			if p, newErr := New(tc.cfg); newErr == nil || newErr.Error() != tc.want {
				t.Errorf("New() = %v, %v; want Validate's error", p, newErr)
			}
		})
	}
}

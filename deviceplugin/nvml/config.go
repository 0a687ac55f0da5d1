package nvml

import (
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/deviceplugin"
)

// Defaults applied by New; see the Config fields.
const (
	DefaultResourceName = "nvidia.com/gpu"
	DefaultSocketName   = "nvidia-gpu.sock"
	DefaultSysfsRoot    = "/sys"
	// MockDGXA100 selects go-nvml's mock of a DGX A100: eight A100 GPUs.
	MockDGXA100 = "dgxa100"
	// MaxMockGPUs bounds Config.MockGPUs.
	MaxMockGPUs = 64
)

// Config describes the GPU plugin. Every field's zero value is valid and means the default
// documented on it. [Config.Validate] rejects bad values, never correcting them, and New calls
// it before it opens NVML.
type Config struct {
	// Mock is "" for the real libnvidia-ml, or MockDGXA100; nothing else.
	Mock string
	// MockGPUs is how many A100s the mock has, 1 to MaxMockGPUs; zero means the DGX A100's
	// eight. It needs Mock: a fleet of mock nodes of different sizes sets it.
	MockGPUs int
	// ResourceName is advertised. Zero means DefaultResourceName (nvidia.com/gpu); it must be
	// an extended resource name (see deviceplugin.Config.ResourceName).
	ResourceName string
	// PluginDir, SocketName and KubeletSocket place the sockets, with the defaults and rules
	// of the deviceplugin.Config fields of the same names, except that SocketName defaults to
	// DefaultSocketName (nvidia-gpu.sock).
	PluginDir, SocketName, KubeletSocket string
	// CDI answers Allocate with CDI device names (nvidia.com/gpu=<uuid>) instead of device nodes.
	CDI bool
	// DeviceDir is the host directory of the GPUs' device nodes (nvidia<minor>, nvidiactl,
	// nvidia-uvm, nvidia-uvm-tools); in the container they are always under /dev. Zero means
	// /dev. The mock's GPUs have no device nodes: a test makes some in a directory of its own.
	DeviceDir string
	// SysfsRoot is where a GPU's NUMA node is read (<root>/bus/pci/devices/<bus id>/numa_node).
	// Zero means DefaultSysfsRoot (/sys). A relative path is read from the working directory.
	SysfsRoot string
	// HealthControlDir, if set, is watched for files named after GPU UUIDs holding
	// "Unhealthy" or "Healthy": a way for operators and tests to take a GPU out of service.
	// Zero means no such directory. It must exist when Run starts.
	HealthControlDir string
	// Events overrides the health event source (tests). Nil: NVML's XID events, when the
	// library supports them.
	Events EventSource
	// Logger receives the plugin's logs. The zero Logger means klog.Background().
	Logger klog.Logger
}

// Validate reports every value of c that New refuses, joined with errors.Join in the order the
// fields are declared. Its own messages start with "nvml: "; the socket fields are checked by
// deviceplugin.Config.Validate, whose messages start with "deviceplugin: " and match
// deviceplugin.ErrInvalidConfig. Validate changes nothing and opens nothing.
func (c Config) Validate() error {
	var errs []error
	if c.Mock != "" && c.Mock != MockDGXA100 {
		errs = append(errs, fmt.Errorf("nvml: Mock must be \"\" (the real libnvidia-ml) or %q, got %q", MockDGXA100, c.Mock))
	}
	if c.MockGPUs != 0 && c.Mock == "" {
		errs = append(errs, fmt.Errorf("nvml: MockGPUs (%d) needs Mock", c.MockGPUs))
	}
	if c.MockGPUs < 0 || c.MockGPUs > MaxMockGPUs {
		errs = append(errs, fmt.Errorf("nvml: MockGPUs must be 0 (eight) or 1 to %d, got %d", MaxMockGPUs, c.MockGPUs))
	}
	if err := c.withDefaults().sdkConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// withDefaults returns c with every zero field that has a default set to it. It does not
// check c: New calls Validate first.
func (c Config) withDefaults() Config {
	if c.ResourceName == "" {
		c.ResourceName = DefaultResourceName
	}
	if c.SocketName == "" {
		c.SocketName = DefaultSocketName
	}
	if c.SysfsRoot == "" {
		c.SysfsRoot = DefaultSysfsRoot
	}
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	return c
}

// sdkConfig is the part of the SDK's Config that c decides: the resource and the sockets.
func (c Config) sdkConfig() deviceplugin.Config {
	return deviceplugin.Config{
		ResourceName:  c.ResourceName,
		PluginDir:     c.PluginDir,
		SocketName:    c.SocketName,
		KubeletSocket: c.KubeletSocket,
	}
}

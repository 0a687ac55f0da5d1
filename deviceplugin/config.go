package deviceplugin

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"
)

// Defaults applied by New.
const (
	// DefaultRegisterTimeout bounds one Register call, as the kubelet's own stub plugin does
	// (10s blocking dial).
	DefaultRegisterTimeout = 10 * time.Second
	// DefaultRetryBackoff is the first wait between failed re-registration attempts.
	DefaultRetryBackoff = 500 * time.Millisecond
	// DefaultMaxRetryBackoff caps the doubling re-registration backoff.
	DefaultMaxRetryBackoff = 30 * time.Second
	// VisibleDevicesEnv is the variable the default Allocate sets to the comma-joined IDs.
	VisibleDevicesEnv = "KDM_VISIBLE_DEVICES"
	// maxSocketPath is the longest unix socket path Linux accepts (sun_path is 108 bytes,
	// including the terminating NUL).
	maxSocketPath = 107
)

// AllocateFunc answers Allocate. It runs on the gRPC handler goroutine with the request's
// context; it may be called concurrently.
type AllocateFunc func(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error)

// PreferredFunc answers GetPreferredAllocation. Same calling rules as AllocateFunc.
type PreferredFunc func(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error)

// PreStartFunc answers PreStartContainer. Same calling rules as AllocateFunc.
type PreStartFunc func(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error)

// RegistrationMode says how the plugin announces itself to the kubelet (or kdm).
type RegistrationMode int

const (
	// RegisterWithKubelet calls Registration.Register on KubeletSocket at Start, and again
	// every time KubeletSocket is created anew (a kubelet restart). The zero value.
	RegisterWithKubelet RegistrationMode = iota
	// PluginWatcher serves pluginregistration v1 (GetInfo, NotifyRegistrationStatus) on a
	// socket in WatcherDir and never calls Register; the kubelet's plugin watcher finds it.
	PluginWatcher
	// NoRegistration only serves the DevicePlugin socket; the caller registers it by hand.
	NoRegistration
)

// String returns the mode's Go name.
func (m RegistrationMode) String() string {
	switch m {
	case RegisterWithKubelet:
		return "RegisterWithKubelet"
	case PluginWatcher:
		return "PluginWatcher"
	case NoRegistration:
		return "NoRegistration"
	default:
		return fmt.Sprintf("RegistrationMode(%d)", int(m))
	}
}

// Config describes one device plugin. New validates it and fills in the defaults; the
// caller's Config (and the slices and messages it points to) is not retained.
type Config struct {
	// ResourceName is the extended resource, e.g. "example.com/gpu". Required. It is not
	// otherwise validated, so that tests can check a manager's rejection of bad names.
	ResourceName string
	// PluginDir is the directory of the plugin socket and, by default, of kubelet.sock.
	// Default pluginapi.DevicePluginPath. Made absolute; created (0750) by Start if missing.
	PluginDir string
	// SocketName is the plugin socket's file name inside PluginDir, sent as the Register
	// request's Endpoint. Default: the resource name with "/" replaced by "_", plus ".sock"
	// ("example.com/gpu" → "example.com_gpu.sock"). Must be a plain file name.
	SocketName string
	// KubeletSocket is the kubelet's Registration socket. Default PluginDir/kubelet.sock.
	KubeletSocket string
	// Options is served by GetDevicePluginOptions and sent in the Register request. Nil means
	// all options off. It is a pointer because protobuf messages must not be copied by value
	// (go vet copylocks).
	Options *pluginapi.DevicePluginOptions
	// Devices is the initial device list. Nil entries are an error; duplicate IDs are allowed
	// and sent as given (useful for testing a manager).
	Devices []*pluginapi.Device
	// Allocate answers Allocate. Nil: for each container request, an error (InvalidArgument)
	// if an ID is not in the current device list, else a response whose only content is the
	// env VisibleDevicesEnv = the IDs joined by ",". No device specs or mounts: a kdm
	// manager has no runtime that would need them.
	Allocate AllocateFunc
	// GetPreferredAllocation answers GetPreferredAllocation. Nil: for each container request,
	// the must-include IDs first, then the available IDs in the order given, up to
	// AllocationSize, without repeats.
	GetPreferredAllocation PreferredFunc
	// PreStartContainer answers PreStartContainer. Nil: an empty response.
	PreStartContainer PreStartFunc
	// Registration chooses how the plugin registers. Default RegisterWithKubelet.
	Registration RegistrationMode
	// WatcherDir is the plugin-watcher directory (e.g. <root>/plugins_registry) where, in
	// PluginWatcher mode, the registration socket WatcherDir/SocketName is served. Required
	// in that mode, ignored otherwise. Made absolute; created (0750) by Start if missing.
	WatcherDir string
	// RegisterTimeout bounds each Register call (dial included). Zero or negative means
	// DefaultRegisterTimeout.
	RegisterTimeout time.Duration
	// KeepRegistering makes a failed first registration non-fatal: Start returns nil and the
	// plugin keeps trying in the background, as after a kubelet restart. A long-running plugin
	// wants this (the kubelet may crash, or be restarted, while it registers); tests that
	// check a refusal leave it off.
	KeepRegistering bool
	// RetryBackoff is the first wait after a failed re-registration; it doubles after each
	// failure up to MaxRetryBackoff. Zero or negative means the defaults.
	RetryBackoff, MaxRetryBackoff time.Duration
	// Version is the API version sent in Register and listed by GetInfo. Default
	// pluginapi.Version ("v1beta1"); set it only to test a manager's version check.
	Version string
	// Clock drives the re-registration backoff. Nil means clock.RealClock{}. Register
	// timeouts are gRPC deadlines and always use real time.
	Clock clock.Clock
	// Logger receives the plugin's logs, with "resourceName" added. The zero Logger means
	// klog.Background().
	Logger klog.Logger
}

// withDefaults validates c and returns a normalised deep copy.
func (c Config) withDefaults() (Config, error) {
	if c.ResourceName == "" {
		return c, fmt.Errorf("%w: ResourceName is required", ErrInvalidConfig)
	}
	var err error
	if c.PluginDir == "" {
		c.PluginDir = pluginapi.DevicePluginPath
	}
	if c.PluginDir, err = filepath.Abs(c.PluginDir); err != nil {
		return c, fmt.Errorf("%w: PluginDir %q: %w", ErrInvalidConfig, c.PluginDir, err)
	}
	if c.SocketName == "" {
		c.SocketName = strings.ReplaceAll(c.ResourceName, "/", "_") + ".sock"
	}
	if strings.ContainsRune(c.SocketName, filepath.Separator) || c.SocketName == "." || c.SocketName == ".." {
		return c, fmt.Errorf("%w: SocketName %q must be a file name, not a path", ErrInvalidConfig, c.SocketName)
	}
	if p := filepath.Join(c.PluginDir, c.SocketName); len(p) > maxSocketPath {
		return c, fmt.Errorf("%w: socket path %q (PluginDir + SocketName) is longer than %d bytes", ErrInvalidConfig, p, maxSocketPath)
	}
	if c.KubeletSocket == "" {
		c.KubeletSocket = filepath.Join(c.PluginDir, "kubelet.sock")
	}
	if c.KubeletSocket, err = filepath.Abs(c.KubeletSocket); err != nil {
		return c, fmt.Errorf("%w: KubeletSocket %q: %w", ErrInvalidConfig, c.KubeletSocket, err)
	}
	switch c.Registration {
	case RegisterWithKubelet, NoRegistration:
	case PluginWatcher:
		if c.WatcherDir == "" {
			return c, fmt.Errorf("%w: WatcherDir is required in PluginWatcher mode", ErrInvalidConfig)
		}
		if c.WatcherDir, err = filepath.Abs(c.WatcherDir); err != nil {
			return c, fmt.Errorf("%w: WatcherDir %q: %w", ErrInvalidConfig, c.WatcherDir, err)
		}
		if p := filepath.Join(c.WatcherDir, c.SocketName); len(p) > maxSocketPath {
			return c, fmt.Errorf("%w: registration socket path %q (WatcherDir + SocketName) is longer than %d bytes", ErrInvalidConfig, p, maxSocketPath)
		}
	default:
		return c, fmt.Errorf("%w: Registration %v is not a known mode", ErrInvalidConfig, c.Registration)
	}
	devs, err := cloneDevices(c.Devices)
	if err != nil {
		return c, fmt.Errorf("%w: Devices%v", ErrInvalidConfig, err)
	}
	c.Devices = devs
	if c.Options == nil {
		c.Options = &pluginapi.DevicePluginOptions{}
	} else {
		c.Options = proto.Clone(c.Options).(*pluginapi.DevicePluginOptions)
	}
	if c.RegisterTimeout <= 0 {
		c.RegisterTimeout = DefaultRegisterTimeout
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.MaxRetryBackoff <= 0 {
		c.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	if c.MaxRetryBackoff < c.RetryBackoff {
		c.MaxRetryBackoff = c.RetryBackoff
	}
	if c.Version == "" {
		c.Version = pluginapi.Version
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	return c, nil
}

// cloneDevices deep-copies devs; a nil entry is an error naming its index ("[i] is nil").
func cloneDevices(devs []*pluginapi.Device) ([]*pluginapi.Device, error) {
	out := make([]*pluginapi.Device, len(devs))
	for i, d := range devs {
		if d == nil {
			return nil, fmt.Errorf("[%d] is nil", i)
		}
		out[i] = proto.Clone(d).(*pluginapi.Device)
	}
	return out, nil
}

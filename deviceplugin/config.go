package deviceplugin

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"
)

// Defaults applied by New; see the Config fields.
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

// Config describes one device plugin. Every field but ResourceName may be left zero: the zero
// value means the default documented on the field. [Config.Validate] rejects bad values, never
// correcting them, and New calls it first; the caller's Config (and the slices and messages it
// points to) is not retained.
type Config struct {
	// ResourceName is the extended resource, e.g. "example.com/gpu". Required; it must be an
	// extended resource name as the kubelet defines it: domain-qualified, outside the
	// kubernetes.io domains, and not starting with "requests.".
	ResourceName string
	// PluginDir is the directory of the plugin socket and, by default, of kubelet.sock.
	// Default pluginapi.DevicePluginPath. A relative path is made absolute against the
	// working directory; Start creates the directory (0750) if it is missing.
	PluginDir string
	// SocketName is the plugin socket's file name inside PluginDir, sent as the Register
	// request's Endpoint. Default: the resource name with "/" replaced by "_", plus ".sock"
	// ("example.com/gpu" → "example.com_gpu.sock"). Must be a plain file name, and
	// PluginDir/SocketName must fit a unix socket address (107 bytes).
	SocketName string
	// KubeletSocket is the kubelet's Registration socket. Default PluginDir/kubelet.sock. A
	// relative path is made absolute; in RegisterWithKubelet mode it must fit a unix socket
	// address (107 bytes).
	KubeletSocket string
	// Options is served by GetDevicePluginOptions and sent in the Register request. Nil means
	// all options off. It is a pointer because protobuf messages must not be copied by value
	// (go vet copylocks).
	Options *pluginapi.DevicePluginOptions
	// Devices is the initial device list. Nil entries are invalid. IDs and health values are
	// sent as given, duplicates included (useful for testing a manager).
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
	// Registration chooses how the plugin registers. The zero value is RegisterWithKubelet;
	// values other than the three modes are invalid.
	Registration RegistrationMode
	// WatcherDir is the plugin-watcher directory (e.g. <root>/plugins_registry) where, in
	// PluginWatcher mode, the registration socket WatcherDir/SocketName is served. Required
	// in that mode, where WatcherDir/SocketName must fit a unix socket address (107 bytes);
	// ignored in the others. A relative path is made absolute; Start creates the directory
	// (0750) if it is missing.
	WatcherDir string
	// RegisterTimeout bounds each Register call (dial included). Zero means
	// DefaultRegisterTimeout (10s); negative is invalid.
	RegisterTimeout time.Duration
	// KeepRegistering makes a failed first registration non-fatal: Start returns nil and the
	// plugin keeps trying in the background, as after a kubelet restart. A long-running plugin
	// wants this (the kubelet may crash, or be restarted, while it registers); tests that
	// check a refusal leave it off.
	KeepRegistering bool
	// RetryBackoff is the first wait after a failed re-registration; it doubles after each
	// failure up to MaxRetryBackoff. Zero means DefaultRetryBackoff (500ms); negative is
	// invalid.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the doubling backoff. Zero means DefaultMaxRetryBackoff (30s), or
	// RetryBackoff when that is longer. Negative is invalid, and so is a value shorter than
	// RetryBackoff (or than DefaultRetryBackoff when RetryBackoff is zero).
	MaxRetryBackoff time.Duration
	// Version is the API version sent in Register and listed by GetInfo. Default
	// pluginapi.Version ("v1beta1"). It is deliberately not validated: set it only to test a
	// manager's version check.
	Version string
	// UnaryInterceptor, if set, wraps every unary RPC the plugin serves: the DevicePlugin
	// service's and, in PluginWatcher mode, GetInfo and NotifyRegistrationStatus. It runs
	// before the plugin answers and may answer instead (to log, count, delay or refuse
	// calls). Nil: none.
	UnaryInterceptor grpc.UnaryServerInterceptor
	// StreamInterceptor, if set, wraps every ListAndWatch stream the plugin serves. The plugin
	// serves the stream until the context of the grpc.ServerStream it is handed ends, so an
	// interceptor can end a stream by handing on a stream with a context of its own. Nil:
	// none.
	StreamInterceptor grpc.StreamServerInterceptor
	// RegisterInterceptor, if set, wraps every Register call the plugin makes on
	// KubeletSocket (RegisterWithKubelet mode). A call it reports as successful counts as a
	// registration. Nil: none.
	RegisterInterceptor grpc.UnaryClientInterceptor
	// Clock drives the re-registration backoff. Nil means clock.RealClock{}. Register
	// timeouts are gRPC deadlines and always use real time.
	Clock clock.Clock
	// Logger receives the plugin's logs, with "resourceName" added. The zero Logger means
	// klog.Background().
	Logger klog.Logger
}

// withDefaults returns a deep copy of c with every zero field set to its default and the
// directories made absolute. It does not check c: New calls Validate first. It fails only
// when a relative path cannot be made absolute (the working directory is gone).
func (c Config) withDefaults() (Config, error) {
	var err error
	if c.PluginDir, err = absPath("PluginDir", c.PluginDir, pluginapi.DevicePluginPath); err != nil {
		return c, err
	}
	c.SocketName = c.socketName()
	if c.KubeletSocket, err = absPath("KubeletSocket", c.KubeletSocket, filepath.Join(c.PluginDir, "kubelet.sock")); err != nil {
		return c, err
	}
	if c.Registration == PluginWatcher {
		if c.WatcherDir, err = absPath("WatcherDir", c.WatcherDir, ""); err != nil {
			return c, err
		}
	}
	c.Devices = cloneDevices(c.Devices)
	if c.Options == nil {
		c.Options = &pluginapi.DevicePluginOptions{}
	} else {
		c.Options = proto.Clone(c.Options).(*pluginapi.DevicePluginOptions)
	}
	if c.RegisterTimeout == 0 {
		c.RegisterTimeout = DefaultRegisterTimeout
	}
	c.RetryBackoff, c.MaxRetryBackoff = c.retryBackoffs()
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

// socketName is SocketName, or its default derived from ResourceName.
func (c Config) socketName() string {
	if c.SocketName != "" {
		return c.SocketName
	}
	return strings.ReplaceAll(c.ResourceName, "/", "_") + ".sock"
}

// retryBackoffs returns the first and the largest re-registration wait, defaults applied.
func (c Config) retryBackoffs() (first, limit time.Duration) {
	first, limit = c.RetryBackoff, c.MaxRetryBackoff
	if first == 0 {
		first = DefaultRetryBackoff
	}
	if limit == 0 {
		limit = max(DefaultMaxRetryBackoff, first)
	}
	return first, limit
}

// absPath returns p, or def when p is empty, made absolute. The error names field.
func absPath(field, p, def string) (string, error) {
	if p == "" {
		p = def
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", invalidf(err, "%s %q cannot be made absolute", field, p)
	}
	return abs, nil
}

// cloneDevices deep-copies devs, which must hold no nil entry (Validate checks).
func cloneDevices(devs []*pluginapi.Device) []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(devs))
	for i, d := range devs {
		out[i] = proto.Clone(d).(*pluginapi.Device)
	}
	return out
}

package deviceplugin

import (
	"context"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// lifecycle is the plugin's one-way state: new → running → stopped (or new → stopped).
type lifecycle int

const (
	stateNew lifecycle = iota
	stateRunning
	stateStopped
)

// Plugin is one device plugin: a DevicePlugin gRPC server on a unix socket plus its
// registration logic. Every exported method is safe for concurrent use. A Plugin is
// single-use: once stopped it cannot be started again; make a new one (a "plugin restart").
type Plugin struct {
	cfg          Config
	log          klog.Logger
	socketPath   string // PluginDir/SocketName
	registryPath string // WatcherDir/SocketName in PluginWatcher mode, else ""

	stopOnce sync.Once
	wg       sync.WaitGroup // every goroutine the plugin starts (serve loops, watcher, registrar)
	done     chan struct{}  // closed first thing in Stop; see Done

	// mu guards everything below. It is never held across an RPC or a stream Send.
	mu            sync.Mutex
	state         lifecycle
	ctx           context.Context // lives from Start to Stop; cancelled first thing in Stop
	cancel        context.CancelFunc
	server        *grpc.Server
	sock, reg     *servedSocket // the DevicePlugin socket and (watcher mode) the registry socket
	devices       []*pluginapi.Device
	registrations int
	// registeredTo is the kubelet socket the last successful Register reached (nil if its
	// identity was unknown): a kick for that same socket needs no new Register.
	registeredTo *socketIdentity
	statuses     []*registerapi.RegistrationStatus
	streams      map[*stream]struct{}
	// streamsOpened counts ListAndWatch streams, to tell them apart in the logs.
	streamsOpened int
}

// New validates cfg and returns an unstarted plugin. It fails with cfg.Validate's error, which
// matches ErrInvalidConfig and names every offending field. It touches no files.
func New(cfg Config) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Plugin{
		cfg:        c,
		log:        c.Logger.WithValues("resourceName", c.ResourceName),
		socketPath: filepath.Join(c.PluginDir, c.SocketName),
		devices:    c.Devices,
		streams:    map[*stream]struct{}{},
		done:       make(chan struct{}),
	}
	p.cfg.Devices = nil // the live list is p.devices
	if c.Registration == PluginWatcher {
		p.registryPath = filepath.Join(c.WatcherDir, c.SocketName)
	}
	if p.cfg.Allocate == nil {
		p.cfg.Allocate = p.defaultAllocate
	}
	if p.cfg.GetPreferredAllocation == nil {
		p.cfg.GetPreferredAllocation = defaultPreferred
	}
	if p.cfg.PreStartContainer == nil {
		p.cfg.PreStartContainer = defaultPreStart
	}
	return p, nil
}

// SocketPath is the absolute path of the DevicePlugin socket (PluginDir/SocketName).
func (p *Plugin) SocketPath() string { return p.socketPath }

// RegistrySocketPath is the absolute path of the pluginregistration socket in PluginWatcher
// mode (WatcherDir/SocketName), or "" in the other modes.
func (p *Plugin) RegistrySocketPath() string { return p.registryPath }

// ResourceName is the configured resource name.
func (p *Plugin) ResourceName() string { return p.cfg.ResourceName }

// Registrations counts successful registrations so far: Register calls that returned OK in
// RegisterWithKubelet mode, NotifyRegistrationStatus calls with PluginRegistered in
// PluginWatcher mode. Always 0 in NoRegistration mode.
func (p *Plugin) Registrations() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.registrations
}

// Done returns a channel that is closed when the plugin begins to stop (Stop, or a failed
// Start), before its streams end and its RPCs return. It may be called before Start.
func (p *Plugin) Done() <-chan struct{} { return p.done }

package nvml

import (
	"context"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	mockgpus "github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
)

// Plugin is the reference NVIDIA GPU device plugin: GPUs by UUID, NUMA-aware preferred
// allocation, XID-driven health.
type Plugin struct {
	cfg    Config
	log    klog.Logger
	lib    nvml.Interface
	gpus   []gpu
	byUUID map[string]gpu
	sdk    *deviceplugin.Plugin
	events EventSource

	mu        sync.Mutex
	unhealthy map[string]string // UUID → reason
}

// New validates cfg (failing with cfg.Validate's error before it opens anything), opens NVML
// (or the mock), enumerates the GPUs and prepares the plugin. It fails with a clear error when
// the real library is absent.
func New(cfg Config) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var lib nvml.Interface
	if cfg.Mock == MockDGXA100 {
		lib = newMockDGXA100(cfg.MockGPUs)
	} else {
		lib = nvml.New()
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, errNoLibrary
		}
		return nil, fmt.Errorf("initialising NVML: %v", nvml.ErrorString(ret))
	}
	gpus, err := enumerate(lib, cfg.SysfsRoot)
	if err != nil {
		_ = lib.Shutdown()
		return nil, err
	}
	p := &Plugin{cfg: cfg, log: cfg.Logger.WithValues("resourceName", cfg.ResourceName), lib: lib, gpus: gpus,
		byUUID: map[string]gpu{}, unhealthy: map[string]string{}, events: cfg.Events}
	for _, g := range gpus {
		p.byUUID[g.UUID] = g
	}
	if p.events == nil && cfg.Mock == "" {
		if ev, err := newNVMLEvents(lib, gpus); err != nil {
			p.log.Info("GPU health events unavailable; only the health control directory marks GPUs unhealthy", "err", err)
		} else {
			p.events = ev
		}
	}
	sdkCfg := cfg.sdkConfig()
	sdkCfg.Options = &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
	sdkCfg.Devices = p.deviceList()
	sdkCfg.Allocate, sdkCfg.GetPreferredAllocation = p.allocate, p.preferred
	sdkCfg.KeepRegistering = true
	sdkCfg.Logger = cfg.Logger
	sdk, err := deviceplugin.New(sdkCfg)
	if err != nil {
		_ = lib.Shutdown()
		return nil, err
	}
	p.sdk = sdk
	p.log.Info("Found GPUs", "count", len(gpus), "mock", cfg.Mock)
	return p, nil
}

// Run serves and registers the plugin (again whenever kubelet.sock is re-created), watches GPU
// health, and returns when ctx ends, after shutting everything down.
func (p *Plugin) Run(ctx context.Context) error {
	defer func() { _ = p.lib.Shutdown() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	if p.cfg.HealthControlDir != "" {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return err
		}
		if err := w.Add(p.cfg.HealthControlDir); err != nil {
			_ = w.Close()
			return fmt.Errorf("watching health control directory: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.watchControlDir(ctx, p.cfg.HealthControlDir, w)
		}()
	}
	if p.events != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.watchEvents(ctx, p.events)
		}()
	}
	return p.sdk.Run(ctx)
}

// SocketPath is the plugin's socket.
func (p *Plugin) SocketPath() string { return p.sdk.SocketPath() }

// Devices returns the advertised device list.
func (p *Plugin) Devices() []*pluginapi.Device { return p.sdk.Devices() }

// MarkUnhealthy takes a GPU out of service; the manager is told at once. It logs only a
// change: a GPU already out of service for the same reason (a control file written twice)
// is not logged again.
func (p *Plugin) MarkUnhealthy(uuid, reason string) error {
	if _, ok := p.byUUID[uuid]; !ok {
		return fmt.Errorf("unknown GPU %q", uuid)
	}
	p.mu.Lock()
	previous, was := p.unhealthy[uuid]
	p.unhealthy[uuid] = reason
	p.mu.Unlock()
	if !was || previous != reason {
		p.log.Info("GPU marked unhealthy", "deviceID", uuid, "reason", reason)
	}
	return p.sdk.SetHealth(uuid, pluginapi.Unhealthy)
}

// MarkHealthy returns a GPU to service.
func (p *Plugin) MarkHealthy(uuid string) error {
	if _, ok := p.byUUID[uuid]; !ok {
		return fmt.Errorf("unknown GPU %q", uuid)
	}
	p.mu.Lock()
	_, was := p.unhealthy[uuid]
	delete(p.unhealthy, uuid)
	p.mu.Unlock()
	if was {
		p.log.Info("GPU marked healthy", "deviceID", uuid)
	}
	return p.sdk.SetHealth(uuid, pluginapi.Healthy)
}

// deviceList builds the advertised devices: UUIDs, health, NUMA node when known.
func (p *Plugin) deviceList() []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(p.gpus))
	for _, g := range p.gpus {
		d := &pluginapi.Device{ID: g.UUID, Health: pluginapi.Healthy}
		if g.NUMA >= 0 {
			d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(g.NUMA)}}}
		}
		out = append(out, d)
	}
	return out
}

// newMockDGXA100 is go-nvml's DGX A100 mock, with n A100s instead of eight when n > 0, and
// stable GPU UUIDs. The mock draws random UUIDs, but a real GPU keeps its UUID across plugin
// restarts, and so must a mock one: pods hold GPUs by UUID.
func newMockDGXA100(n int) *server.Server {
	s := dgxa100.New()
	if n > 0 {
		s = dgxa100.NewWithGPUs(mockgpus.Multiple(n, mockgpus.A100_SXM4_40GB)...)
	}
	for i, d := range s.Devices {
		if md, ok := d.(*server.Device); ok {
			md.Lock()
			md.UUID = fmt.Sprintf("GPU-a100a100-0000-4000-8000-%012d", i)
			md.Unlock()
		}
	}
	return s
}

package devicemanager

import (
	"context"
	"fmt"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/endpoint"
)

// supportedVersions are the device-plugin API versions the manager speaks.
var supportedVersions = []string{pluginapi.Version}

// registrationServer serves the Registration service on kubelet.sock.
type registrationServer struct {
	pluginapi.UnimplementedRegistrationServer
	m *ManagerImpl
}

// Register validates the request and connects to the plugin synchronously: the call returns
// only once the plugin has been dialled and its options read, and any failure goes back to
// the plugin. Options in the request are ignored; they come from GetDevicePluginOptions.
func (s *registrationServer) Register(ctx context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	m := s.m
	m.metrics.registrations.WithLabelValues(r.ResourceName).Inc()
	log := m.log.WithValues("resourceName", r.ResourceName, "endpoint", r.Endpoint)
	log.V(2).Info("Got registration request from device plugin")
	if r.Version != pluginapi.Version {
		err := fmt.Errorf("requested API version %q is not supported by kubelet. Supported version is %q", r.Version, supportedVersions)
		log.Error(err, "Bad registration request from device plugin")
		return &pluginapi.Empty{}, err
	}
	if !isExtendedResourceName(r.ResourceName) {
		err := fmt.Errorf("the ResourceName %q is invalid", r.ResourceName)
		log.Error(err, "Bad registration request from device plugin")
		return &pluginapi.Empty{}, err
	}
	path, err := pluginSocketPath(m.cfg.PluginDir, r.Endpoint)
	if err != nil {
		log.Error(err, "Bad registration request from device plugin")
		return &pluginapi.Empty{}, err
	}
	if err := m.connect(ctx, r.ResourceName, path); err != nil {
		log.Error(err, "Failed to connect to device plugin")
		return &pluginapi.Empty{}, err
	}
	return &pluginapi.Empty{}, nil
}

// connect dials the plugin at path and makes it the resource's current instance. A previous
// instance is stopped; its stream ending can no longer touch the resource. A failed dial
// leaves the previous instance, if any, in place.
func (m *ManagerImpl) connect(ctx context.Context, resource, path string) error {
	if !m.isRunning() {
		return fmt.Errorf("device manager is not running")
	}
	ep, err := endpoint.Dial(ctx, resource, path, m.cfg.Endpoint)
	if err != nil {
		return err
	}
	m.life.Lock()
	defer m.life.Unlock()
	if !m.started || m.stopped {
		ep.Stop()
		return fmt.Errorf("device manager is not running")
	}
	opts := ep.Options()
	m.mu.Lock()
	old := m.endpoints[resource]
	m.endpoints[resource] = endpointInfo{ep: ep, opts: opts}
	m.signalDeviceChangeLocked()
	m.mu.Unlock()
	if old.ep != nil {
		old.ep.Stop()
	}
	m.log.V(2).Info("Device plugin connected", "resourceName", resource, "socket", path,
		"preStartRequired", opts.GetPreStartRequired(),
		"getPreferredAllocationAvailable", opts.GetGetPreferredAllocationAvailable())
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.runEndpoint(m.runCtx, resource, ep)
	}()
	return nil
}

// isRunning reports whether Start has succeeded and Stop has not been called.
func (m *ManagerImpl) isRunning() bool {
	m.life.Lock()
	defer m.life.Unlock()
	return m.started && !m.stopped
}

// runEndpoint streams the plugin's devices until the stream ends. Only if ep is still the
// resource's current instance are its devices marked unhealthy and its stop time stamped.
func (m *ManagerImpl) runEndpoint(ctx context.Context, resource string, ep *endpoint.Endpoint) {
	log := m.log.WithValues("resourceName", resource, "socket", ep.SocketPath())
	err := ep.Run(ctx, func(devs []*pluginapi.Device) { m.updateDevices(resource, ep, devs) })
	ep.Stop() // stamps the stop time before anyone can see the devices turn unhealthy
	m.mu.Lock()
	current := m.endpoints[resource].ep == ep
	if current {
		m.markResourceUnhealthyLocked(resource)
	}
	m.mu.Unlock()
	if current {
		log.Info("Device plugin disconnected", "err", err)
	} else {
		log.V(2).Info("Stream of a replaced device plugin instance ended", "err", err)
	}
}

// markResourceUnhealthyLocked moves every healthy device of the resource to unhealthy: the
// plugin is gone, so nothing it advertised can be allocated. Capacity is kept for the grace
// period. Callers hold mu.
func (m *ManagerImpl) markResourceUnhealthyLocked(resource string) {
	healthy, ok := m.healthy[resource]
	if !ok {
		return
	}
	if m.unhealthy[resource] == nil {
		m.unhealthy[resource] = healthy.Clone()
	} else {
		m.unhealthy[resource] = m.unhealthy[resource].Union(healthy)
	}
	m.healthy[resource] = healthy.Clear()
	m.signalDeviceChangeLocked()
	m.log.V(2).Info("Marked all devices of resource unhealthy", "resourceName", resource)
}

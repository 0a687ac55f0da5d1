package deviceplugin

import (
	"context"

	"google.golang.org/protobuf/proto"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registryServer is the pluginregistration v1 service served in PluginWatcher mode.
type registryServer struct {
	registerapi.UnimplementedRegistrationServer
	p *Plugin
}

var _ registerapi.RegistrationServer = (*registryServer)(nil)

// GetInfo describes the plugin as the kubelet's plugin watcher expects: type DevicePlugin,
// the resource name, and the absolute path of the DevicePlugin socket.
func (s *registryServer) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	s.p.log.V(4).Info("GetInfo")
	return &registerapi.PluginInfo{
		Type:              registerapi.DevicePlugin,
		Name:              s.p.cfg.ResourceName,
		Endpoint:          s.p.socketPath,
		SupportedVersions: []string{s.p.cfg.Version},
	}, nil
}

// NotifyRegistrationStatus records the watcher's verdict; a positive one counts as a
// registration.
func (s *registryServer) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	p := s.p
	p.mu.Lock()
	p.statuses = append(p.statuses, proto.Clone(st).(*registerapi.RegistrationStatus))
	if st.GetPluginRegistered() {
		p.registrations++
	}
	p.mu.Unlock()
	if st.GetPluginRegistered() {
		p.log.V(2).Info("Registered with the plugin watcher", "endpoint", p.socketPath)
	} else {
		p.log.Info("Plugin watcher refused the registration", "endpoint", p.socketPath, "err", st.GetError())
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// RegistrationStatuses returns copies of every NotifyRegistrationStatus received, in order
// (PluginWatcher mode; empty otherwise).
func (p *Plugin) RegistrationStatuses() []*registerapi.RegistrationStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return cloneAll(p.statuses)
}

func cloneAll[M proto.Message](in []M) []M {
	if in == nil {
		return nil
	}
	out := make([]M, len(in))
	for i, m := range in {
		out[i] = proto.Clone(m).(M)
	}
	return out
}

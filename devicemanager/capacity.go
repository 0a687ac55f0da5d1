package devicemanager

import (
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kdm-project/kdm/internal/state"
)

// GetCapacity returns, per resource, capacity (healthy + unhealthy devices) and allocatable
// (healthy devices), and the resources removed because their endpoint is gone or stopped for
// longer than the grace period. Removal deletes the resource's endpoint and device sets and
// writes the checkpoint. A resource with an endpoint but no device list yet is not reported.
// Embedders publish removed resources with capacity 0, as the kubelet does.
//
// Unless a resource is due for removal, GetCapacity takes no lock: it reads the counts the
// state publishes at every change (state.CapacityView), so a reader polling capacity never
// makes a plugin's stream or an admission wait, nor waits for them.
func (m *Manager) GetCapacity() (capacity, allocatable v1.ResourceList, removed []string) {
	if !m.restoring.Load() { // the view is then the restored state's, or a later one
		if view := m.st.CapacityView(); !view.Expired(m.cfg.Clock.Now(), m.cfg.GracePeriod) {
			capacity, allocatable = make(v1.ResourceList, len(view)), make(v1.ResourceList, len(view))
			for _, r := range view {
				capacity[v1.ResourceName(r.Name)] = *resource.NewQuantity(r.Capacity, resource.DecimalSI)
				allocatable[v1.ResourceName(r.Name)] = *resource.NewQuantity(r.Allocatable, resource.DecimalSI)
			}
			return capacity, allocatable, nil
		}
	}
	capacity, allocatable = v1.ResourceList{}, v1.ResourceList{}
	m.mu.Lock()
	removed = m.st.Capacity(m.cfg.Clock.Now(), m.cfg.GracePeriod, func(res string, c state.Counts) {
		capacity[v1.ResourceName(res)] = *resource.NewQuantity(c.Capacity, resource.DecimalSI)
		allocatable[v1.ResourceName(res)] = *resource.NewQuantity(c.Allocatable, resource.DecimalSI)
	})
	for _, res := range removed {
		if info, ok := m.endpoints[res]; ok {
			info.ep.Stop()
		}
		delete(m.endpoints, res)
	}
	m.mu.Unlock()
	if len(removed) > 0 {
		m.log.V(2).Info("Removed resources whose device plugin is gone", "resourceNames", removed)
		m.persistDeviceLists()
	}
	return capacity, allocatable, removed
}

// ShouldResetExtendedResourceCapacity reports whether the plugin directory holds no entry at
// all (ignoring dot-files): the node's state was wiped, so a re-registering node should zero
// its extended resources. A read error gives false.
func (m *Manager) ShouldResetExtendedResourceCapacity() bool {
	entries, err := os.ReadDir(m.cfg.PluginDir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			return false
		}
	}
	return true
}

// DeviceChanges returns a channel that is closed at the next change of a resource's devices,
// their health, or its endpoint (registration, stop). Call it again after the channel closes
// to wait for the change after that. Node status publishers use it to refresh capacity as soon
// as it moves rather than on their next tick.
func (m *Manager) DeviceChanges() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deviceChange
}

package devicemanager

import (
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
)

// GetCapacity returns, per resource, capacity (healthy + unhealthy devices) and allocatable
// (healthy devices), and the resources removed because their endpoint is gone or stopped for
// longer than the grace period. Removal deletes the resource's endpoint and device sets and
// writes the checkpoint. A resource with an endpoint but no device list yet is not reported.
// Embedders publish removed resources with capacity 0, as the kubelet does.
func (m *ManagerImpl) GetCapacity() (capacity, allocatable v1.ResourceList, removed []string) {
	capacity, allocatable = v1.ResourceList{}, v1.ResourceList{}
	deleted := sets.New[string]()
	m.mu.Lock()
	expired := func(res string) bool {
		info, ok := m.endpoints[res]
		if !ok {
			m.log.Error(nil, "Unexpected: device sets and endpoints became out of sync", "resourceName", res)
			return true
		}
		return info.ep.GracePeriodExpired(m.cfg.GracePeriod)
	}
	counts := map[string][2]int64{}
	for res, devs := range m.healthy {
		if expired(res) {
			deleted.Insert(res)
			continue
		}
		c := counts[res]
		c[0] += int64(devs.Len())
		c[1] += int64(devs.Len())
		counts[res] = c
	}
	for res, devs := range m.unhealthy {
		if expired(res) {
			deleted.Insert(res)
			continue
		}
		c := counts[res]
		c[0] += int64(devs.Len())
		counts[res] = c
	}
	for res, c := range counts {
		capacity[v1.ResourceName(res)] = *resource.NewQuantity(c[0], resource.DecimalSI)
		if _, ok := m.healthy[res]; ok {
			allocatable[v1.ResourceName(res)] = *resource.NewQuantity(c[1], resource.DecimalSI)
		}
	}
	for res := range deleted {
		if info, ok := m.endpoints[res]; ok {
			info.ep.Stop()
		}
		delete(m.endpoints, res)
		delete(m.healthy, res)
		delete(m.unhealthy, res)
		delete(m.allDevices, res)
		delete(m.listedBy, res)
	}
	m.mu.Unlock()
	if deleted.Len() > 0 {
		m.log.V(2).Info("Removed resources whose device plugin is gone", "resourceNames", sets.List(deleted))
		m.persistDeviceLists()
	}
	return capacity, allocatable, sets.List(deleted)
}

// ShouldResetExtendedResourceCapacity reports whether the plugin directory holds no entry at
// all (ignoring dot-files): the node's state was wiped, so a re-registering node should zero
// its extended resources. A read error gives false.
func (m *ManagerImpl) ShouldResetExtendedResourceCapacity() bool {
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

// isDevicePluginResourceLocked reports whether the resource is served, or was served and
// still has allocations, by a device plugin. Callers hold mu.
func (m *ManagerImpl) isDevicePluginResourceLocked(res string) bool {
	if _, ok := m.healthy[res]; ok {
		return true
	}
	_, ok := m.allocated[res]
	return ok
}

// DeviceChanges returns a channel that is closed at the next change of a resource's devices,
// their health, or its endpoint (registration, stop). Call it again after the channel closes
// to wait for the change after that. Node status publishers use it to refresh capacity as soon
// as it moves rather than on their next tick.
func (m *ManagerImpl) DeviceChanges() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deviceChange
}

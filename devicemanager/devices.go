package devicemanager

import (
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/endpoint"
)

// updateChannelSize is the buffer of the health-update channel; a full channel drops updates
// rather than blocking the plugin's stream (the kubelet's behaviour since 1.33).
const updateChannelSize = 100

// Update names pods whose devices changed health and whose status should be refreshed.
type Update struct {
	PodUIDs []string
}

// Updates returns the channel on which health changes of allocated devices are announced.
func (m *ManagerImpl) Updates() <-chan Update { return m.updates }

// updateDevices replaces the resource's device sets with the plugin's latest list and writes
// the checkpoint. Lists from an instance that is no longer the resource's current one are
// ignored, so a replaced plugin cannot overwrite its successor's devices.
func (m *ManagerImpl) updateDevices(resource string, from *endpoint.Endpoint, devs []*pluginapi.Device) {
	sync := !m.cfg.Policy.CoalesceDeviceListWrites
	if sync {
		// The change and its write form one step for WaitForCheckpointWrites.
		m.writeMu.Lock()
		defer m.writeMu.Unlock()
	}
	m.mu.Lock()
	if cur, ok := m.endpoints[resource]; !ok || cur.ep != from {
		m.mu.Unlock()
		m.log.V(4).Info("Ignored device list from a replaced plugin instance", "resourceName", resource)
		return
	}
	changed := m.applyDeviceListLocked(resource, devs)
	m.listedBy[resource] = from
	m.checkRecoveredLocked(resource, m.allDevices[resource])
	uids := m.pods.podsHolding(resource, changed)
	m.mu.Unlock()

	m.notify(resource, uids)
	m.log.V(4).Info("Updated devices of resource", "resourceName", resource, "devices", len(devs))
	if sync {
		m.persistDeviceListsLocked()
	} else {
		m.persistDeviceLists()
	}
	m.mu.Lock()
	m.signalDeviceChangeLocked()
	m.mu.Unlock()
}

// applyDeviceListLocked makes devs the resource's device list, replacing healthy, unhealthy
// and all devices entirely, and returns the IDs that are new or changed health. When the list
// names the same devices as before (the common case: a health flip), the sets are updated in
// place instead of rebuilt. Callers hold mu.
func (m *ManagerImpl) applyDeviceListLocked(resource string, devs []*pluginapi.Device) []string {
	if changed, ok := m.updateInPlaceLocked(resource, devs); ok {
		return changed
	}
	return m.rebuildDeviceListLocked(resource, devs)
}

// rebuildDeviceListLocked builds fresh sets and map from devs. Callers hold mu.
func (m *ManagerImpl) rebuildDeviceListLocked(resource string, devs []*pluginapi.Device) []string {
	old := m.allDevices[resource]
	var changed []string
	healthy, unhealthy := sets.New[string](), sets.New[string]()
	all := make(map[string]*pluginapi.Device, len(devs))
	for _, d := range devs {
		if d.Health == pluginapi.Healthy {
			healthy.Insert(d.ID)
		} else {
			unhealthy.Insert(d.ID)
		}
		all[d.ID] = d
		if prev, ok := old[d.ID]; !ok || prev.Health != d.Health {
			changed = append(changed, d.ID)
		}
	}
	m.healthy[resource], m.unhealthy[resource], m.allDevices[resource] = healthy, unhealthy, all
	return changed
}

// updateInPlaceLocked applies a list that names exactly the resource's current devices by
// updating the existing sets and map. It reports false, having changed nothing, when the list
// adds or drops a device. A list that repeats an ID (a misbehaving plugin) is detected after
// the update and rebuilt from scratch, with every listed device reported as changed. Callers
// hold mu.
func (m *ManagerImpl) updateInPlaceLocked(resource string, devs []*pluginapi.Device) ([]string, bool) {
	old, healthy, unhealthy := m.allDevices[resource], m.healthy[resource], m.unhealthy[resource]
	if old == nil || healthy == nil || unhealthy == nil || len(old) != len(devs) {
		return nil, false
	}
	for _, d := range devs {
		if _, ok := old[d.ID]; !ok {
			return nil, false
		}
	}
	var changed []string
	for _, d := range devs {
		if old[d.ID].Health != d.Health {
			changed = append(changed, d.ID)
		}
		// The sets, not the old list, decide: a disconnect moves devices to unhealthy
		// without touching their listed health.
		if isHealthy := d.Health == pluginapi.Healthy; isHealthy != healthy.Has(d.ID) {
			if isHealthy {
				unhealthy.Delete(d.ID)
				healthy.Insert(d.ID)
			} else {
				healthy.Delete(d.ID)
				unhealthy.Insert(d.ID)
			}
		}
		old[d.ID] = d
	}
	// Same length and every ID current: a repeated ID means another current ID is missing.
	// Each entry now holds the last device listed under its ID, so a repeat shows as an
	// earlier device that is not its ID's entry.
	for _, d := range devs {
		if old[d.ID] != d {
			delete(m.allDevices, resource)
			m.rebuildDeviceListLocked(resource, devs)
			all := make([]string, 0, len(devs))
			for _, d := range devs {
				all = append(all, d.ID)
			}
			return all, true
		}
	}
	return changed, true
}

// notify sends one Update without blocking; it is dropped, with an error log, when the
// channel is full.
func (m *ManagerImpl) notify(resource string, uids []string) {
	if len(uids) == 0 {
		return
	}
	select {
	case m.updates <- Update{PodUIDs: uids}:
	default:
		m.log.Error(nil, "Dropped device health update: channel full", "resourceName", resource, "podUIDs", uids)
	}
}

package devicemanager

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Device health as pods see it (UpdateAllocatedResourcesStatus) is the health the manager
// allocates by: a device in the resource's unhealthy set is Unhealthy, whether its plugin
// listed it so or went away. The kubelet reports the health its plugin last listed instead,
// so a pod keeps showing Healthy devices of a plugin that is gone while the node's
// allocatable says they are not. The changes that move devices between the sets without a
// list saying so, a disconnect and the first list after it, are announced on Updates here,
// like the changes a list makes (updateDevices), so that every view of a pod follows at once.

// disconnectLocked records that the resource's plugin went away at stoppedAt (State.Disconnect:
// every healthy device turns unhealthy), and names on Updates the pods holding a device that
// was healthy until then. Nothing is announced when the stream ended because the manager is
// stopping: the plugin did not go away. It reports whether the resource was known. Callers
// hold mu; the send does not block.
func (m *Manager) disconnectLocked(resource string, stoppedAt time.Time) bool {
	var turned []string
	if m.runCtx.Err() == nil { // when the manager stops nothing is announced
		turned = m.st.AllocatedAmong(resource, m.st.Healthy(resource))
	}
	if !m.st.Disconnect(resource, stoppedAt) {
		return false
	}
	if len(turned) > 0 && m.runCtx.Err() == nil && !m.cfg.Policy.NoDeviceHealthInPodStatus {
		m.notify(resource, m.st.PodsHolding(resource, turned))
	}
	return true
}

// applyDeviceListLocked applies a device list of the resource's current instance
// (State.ApplyDeviceList) and returns the pods to name on Updates: those holding a
// device whose listed health changed and, for a new instance's first list, those holding a
// device the list makes healthy again after a disconnect had marked it unhealthy (its listed
// health did not change, so the list alone shows no change). Callers hold mu.
func (m *Manager) applyDeviceListLocked(resource string, devs []*pluginapi.Device) []string {
	var down []string
	if !m.st.Plugin(resource).Listed {
		down = m.st.AllocatedAmong(resource, m.st.Unhealthy(resource))
	}
	uids := m.st.ApplyDeviceList(resource, devs)
	if len(down) == 0 {
		return uids
	}
	healthy := m.st.Healthy(resource)
	up := slices.DeleteFunc(down, func(id string) bool { return !healthy.Has(id) })
	if len(up) == 0 {
		return uids
	}
	return sets.List(sets.New(uids...).Insert(m.st.PodsHolding(resource, up)...))
}

// podDeviceHealthLocked is the health pods are told for one of their devices: Unhealthy when
// the device is in the resource's unhealthy set or listed with another health than Healthy,
// Healthy otherwise (a device no plugin lists, as after a restart before the plugin is back,
// counts as Healthy, as in the kubelet). Callers hold mu.
func (m *Manager) podDeviceHealthLocked(resource, id string) string {
	if m.st.Unhealthy(resource).Has(id) {
		return pluginapi.Unhealthy
	}
	if d, ok := m.st.Device(resource, id); ok && d.Health != pluginapi.Healthy {
		return pluginapi.Unhealthy
	}
	return pluginapi.Healthy
}

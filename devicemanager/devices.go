package devicemanager

import (
	"runtime"
	"slices"

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
func (m *Manager) Updates() <-chan Update { return m.updates }

// updateDevices replaces the resource's device sets with the plugin's latest list and writes
// the checkpoint. Lists from an instance that is no longer the resource's current one are
// not applied, so a replaced plugin cannot overwrite its successor's devices (both kubelets
// apply every connected instance's lists, the last one winning); under
// Policy.PromoteLiveInstance the last of them is kept for the instance's promotion.
func (m *Manager) updateDevices(resource string, from *endpoint.Endpoint, devs []*pluginapi.Device) {
	m.applyDevices(resource, from, devs, false)
}

// applyPromotedList applies the last list a promoted instance sent while it was replaced. It
// runs after the lock that promoted the instance is let go, so the instance's own stream may
// have ended in between: its end then marks (or has marked) the devices unhealthy, and the
// list is not applied, since nothing would be left to correct it.
func (m *Manager) applyPromotedList(resource string, promoted *endpoint.Endpoint, devs []*pluginapi.Device) {
	m.applyDevices(resource, promoted, devs, true)
}

// applyDevices is updateDevices; with onlyLive, a list whose instance has stopped is dropped.
func (m *Manager) applyDevices(resource string, from *endpoint.Endpoint, devs []*pluginapi.Device, onlyLive bool) {
	sync := !m.cfg.Policy.CoalesceDeviceListWrites
	if sync {
		// The change and its write form one step for WaitForCheckpointWrites.
		m.writeMu.Lock()
		defer m.writeMu.Unlock()
	}
	m.mu.Lock()
	if cur, ok := m.endpoints[resource]; !ok || cur.ep != from {
		m.keepReplacedListLocked(resource, from, devs)
		m.mu.Unlock()
		m.log.V(4).Info("Ignored device list from a replaced plugin instance", "resourceName", resource)
		return
	}
	if onlyLive && from.IsStopped() {
		m.mu.Unlock()
		m.log.V(4).Info("Ignored device list from a plugin instance whose stream ended", "resourceName", resource)
		return
	}
	uids := m.applyDeviceListLocked(resource, devs)
	m.checkRecoveredLocked(resource)
	// Count the change under the lock that applied it: an admission asleep waiting for a
	// plugin is awake from now on for the wait order (lockTurn), though the broadcast that
	// wakes it comes after the checkpoint write below, for those who wait for the file.
	m.deviceChanges++
	m.mu.Unlock()

	if !m.cfg.Policy.NoDeviceHealthInPodStatus {
		m.notify(resource, uids)
	}
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

// notify sends one Update without blocking; it is dropped, with an error log, when the
// channel is full. After a send it yields the processor: the reader it woke is queued to run
// next on this one, and the caller goes on to write the checkpoint, which can keep the
// processor busy for a millisecond while another one may take long to wake up. Yielding
// lets the reader see the update first.
func (m *Manager) notify(resource string, uids []string) {
	if len(uids) == 0 {
		return
	}
	select {
	case m.updates <- Update{PodUIDs: uids}:
		runtime.Gosched()
	default:
		m.log.Error(nil, "Dropped device health update: channel full", "resourceName", resource, "podUIDs", uids)
	}
}

// keepReplacedListLocked remembers devs as the last list of from, a replaced instance of
// resource that is still kept, so that its promotion (Policy.PromoteLiveInstance) starts from
// what it last said. Lists of instances that are not kept, or under a policy without
// promotion, are dropped. Callers hold mu.
func (m *Manager) keepReplacedListLocked(resource string, from *endpoint.Endpoint, devs []*pluginapi.Device) {
	if !m.cfg.Policy.PromoteLiveInstance || !slices.Contains(m.replaced[resource], from) {
		return
	}
	if m.replacedLists == nil {
		m.replacedLists = map[*endpoint.Endpoint][]*pluginapi.Device{}
	}
	m.replacedLists[from] = devs
}

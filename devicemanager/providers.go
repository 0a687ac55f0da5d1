package devicemanager

import (
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/checkpoint"
	"github.com/kdm-project/kdm/internal/state"
)

// DeviceNUMA maps resource → device ID → the device's NUMA nodes (empty: no topology).
type DeviceNUMA map[string]map[string][]int64

// GetDevices returns the devices the container holds, with the NUMA nodes recorded at
// allocation time (ascending; empty for a device without topology). Resources with no
// devices are left out. Unlike the kubelet, a device recorded under real nodes and under -1
// keeps its real nodes whatever the map order.
func (m *Manager) GetDevices(podUID, containerName string) DeviceNUMA {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := DeviceNUMA{}
	for res, a := range m.st.Allocations(podUID, containerName) {
		if len(a.Devices) == 0 {
			continue
		}
		devs := map[string][]int64{}
		for node, ids := range a.Devices {
			for _, id := range ids {
				if _, ok := devs[id]; !ok {
					devs[id] = []int64{}
				}
				if node != state.NoTopology {
					devs[id] = append(devs[id], node)
				}
			}
		}
		for id := range devs {
			sort.Slice(devs[id], func(i, j int) bool { return devs[id][i] < devs[id][j] })
		}
		out[res] = devs
	}
	return out
}

// GetAllocatableDevices returns every healthy device per resource, allocated ones included,
// with its NUMA nodes. A registered resource with no healthy device maps to an empty set.
func (m *Manager) GetAllocatableDevices() DeviceNUMA {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := DeviceNUMA{}
	for _, res := range m.st.Listed() {
		devs := map[string][]int64{}
		for id := range m.st.Healthy(res) {
			nodes := []int64{}
			if d, ok := m.st.Device(res, id); ok {
				nodes = append(nodes, d.NUMANodes...)
			}
			devs[id] = nodes
		}
		out[res] = devs
	}
	return out
}

// SanitizeNodeAllocatable raises, for a pod that already holds devices, each device resource's
// allocatable to at least the number of devices allocated on the node, so that such a pod
// passes resource-fit checks while capacity is 0 after a restart. It returns a copy; pods
// without devices get allocatable back unchanged.
func (m *Manager) SanitizeNodeAllocatable(podUID string, allocatable v1.ResourceList) v1.ResourceList {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.st.HasPod(podUID) {
		return allocatable
	}
	out := allocatable.DeepCopy()
	if out == nil {
		out = v1.ResourceList{}
	}
	for _, res := range m.st.AllocatedResources() {
		name, n := v1.ResourceName(res), int64(m.st.AllocatedCount(res))
		if q, ok := out[name]; ok && q.Value() >= n {
			continue
		}
		out[name] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return out
}

// UpdateAllocatedResourcesStatus fills each app container's AllocatedResourcesStatus with the
// health of the devices it holds (KEP-4680): Unhealthy when the plugin lists them so or has
// gone away (podDeviceHealthLocked). Unknown devices count as Healthy. The entry for a
// resource replaces one of the same name.
//
// Under Policy.NoDeviceHealthInPodStatus it changes nothing.
func (m *Manager) UpdateAllocatedResourcesStatus(pod *v1.Pod, status *v1.PodStatus) {
	if m.cfg.Policy.NoDeviceHealthInPodStatus {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	podUID := string(pod.UID)
	for i := range status.ContainerStatuses {
		cs := &status.ContainerStatuses[i]
		held := m.st.Allocations(podUID, cs.Name)
		for _, res := range state.SortedKeys(held) {
			rs := v1.ResourceStatus{Name: v1.ResourceName(res)}
			for _, id := range held[res].IDs().UnsortedList() {
				health := v1.ResourceHealthStatusHealthy
				if m.podDeviceHealthLocked(res, id) != pluginapi.Healthy {
					health = v1.ResourceHealthStatusUnhealthy
				}
				rs.Resources = append(rs.Resources, v1.ResourceHealth{ResourceID: v1.ResourceID(id), Health: health})
			}
			sort.Slice(rs.Resources, func(a, b int) bool { return rs.Resources[a].ResourceID < rs.Resources[b].ResourceID })
			replaced := false
			for j := range cs.AllocatedResourcesStatus {
				if cs.AllocatedResourcesStatus[j].Name == rs.Name {
					cs.AllocatedResourcesStatus[j] = rs
					replaced = true
				}
			}
			if !replaced {
				cs.AllocatedResourcesStatus = append(cs.AllocatedResourcesStatus, rs)
			}
		}
	}
}

// GetContainerAllocations returns the container's checkpoint entries, one per resource it
// holds devices of, sorted by resource: the same entries the checkpoint stores for it. Callers
// may keep them as a second copy and give them back through Sources.RecoveredAllocations.
func (m *Manager) GetContainerAllocations(podUID, containerName string) []checkpoint.PodDevicesEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.ContainerEntries(podUID, containerName)
}

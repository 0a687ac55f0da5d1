package devicemanager

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// GetTopologyHints returns, per device-plugin resource the container asks for, the NUMA node
// sets its request can be met from. A nil list means "no preference" (the resource has no
// topology); an empty list means the request cannot be met.
func (m *Manager) GetTopologyHints(pod *v1.Pod, container *v1.Container) map[string][]TopologyHint {
	m.UpdateAllocatedDevices()
	podUID := string(pod.UID)
	m.mu.Lock()
	defer m.mu.Unlock()
	requests := map[string]int{}
	for name, qty := range container.Resources.Limits {
		requests[string(name)] = int(qty.Value())
	}
	return m.st.Hints(requests, func(res string) sets.Set[string] {
		return m.st.ContainerDevices(podUID, container.Name, res)
	}, func(res string) sets.Set[string] { return m.st.PoolOf(podUID, res) }, m.cfg.NUMANodes, m.cfg.Policy.HintsOverEveryNUMANode)
}

// GetPodTopologyHints is GetTopologyHints for the whole pod: the request per resource is the
// larger of the init-container peak and the sum of app containers and sidecars, and already
// allocated devices are the union over the pod's containers.
func (m *Manager) GetPodTopologyHints(pod *v1.Pod) map[string][]TopologyHint {
	m.UpdateAllocatedDevices()
	podUID := string(pod.UID)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.Hints(podDeviceRequests(pod), func(res string) sets.Set[string] {
		return m.st.PodDevices(podUID, res)
	}, func(string) sets.Set[string] { return nil }, m.cfg.NUMANodes, m.cfg.Policy.HintsOverEveryNUMANode)
}

// podDeviceRequests computes the pod's effective limit per resource: the larger of the peak
// during init (a regular init container plus the sidecars started before it, or the sidecars
// so far) and the steady state (app containers plus every sidecar).
func podDeviceRequests(pod *v1.Pod) map[string]int {
	steady := map[string]int{}
	for _, c := range pod.Spec.Containers {
		for name, q := range c.Resources.Limits {
			steady[string(name)] += int(q.Value())
		}
	}
	peak := map[string]int{}
	sidecars := map[string]int{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		for name, q := range c.Resources.Limits {
			res, v := string(name), int(q.Value())
			if isRestartable(c) {
				sidecars[res] += v
				peak[res] = max(peak[res], sidecars[res])
			} else {
				peak[res] = max(peak[res], v+sidecars[res])
			}
		}
	}
	for res, v := range sidecars {
		steady[res] += v
	}
	out := map[string]int{}
	for res, v := range steady {
		out[res] = v
	}
	for res, v := range peak {
		out[res] = max(out[res], v)
	}
	return out
}

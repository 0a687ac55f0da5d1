package agent

import (
	v1 "k8s.io/api/core/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/podresources"
)

// podsProvider serves the agent's pods to podresources.
type podsProvider struct{ a *Agent }

func (p podsProvider) GetActivePods() []*v1.Pod { return p.a.activePods() }

func (p podsProvider) GetPods() []*v1.Pod {
	p.a.mu.Lock()
	defer p.a.mu.Unlock()
	out := make([]*v1.Pod, 0, len(p.a.pods))
	for _, pod := range p.a.pods {
		out = append(out, pod)
	}
	return out
}

func (p podsProvider) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	for _, pod := range p.a.activePods() {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, true
		}
	}
	return nil, false
}

// devicesProvider serves the device manager's assignments to podresources.
type devicesProvider struct{ m *devicemanager.Manager }

func (d devicesProvider) UpdateAllocatedDevices() { d.m.UpdateAllocatedDevices() }

func (d devicesProvider) GetDevices(podUID, containerName string) []*podresourcesv1.ContainerDevices {
	return podresources.Flatten(d.m.GetDevices(podUID, containerName))
}

func (d devicesProvider) GetAllocatableDevices() []*podresourcesv1.ContainerDevices {
	return podresources.Flatten(d.m.GetAllocatableDevices())
}

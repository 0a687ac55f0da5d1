package podresources

import (
	"errors"
	"sort"

	v1 "k8s.io/api/core/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodsProvider knows the node's pods.
type PodsProvider interface {
	// GetActivePods returns the pods that are not terminated.
	GetActivePods() []*v1.Pod
	// GetPods returns every pod the node knows, terminated ones included.
	GetPods() []*v1.Pod
	// GetPodByName finds a pod by namespace and name.
	GetPodByName(namespace, name string) (*v1.Pod, bool)
}

// DevicesProvider knows which devices containers hold (the device manager).
type DevicesProvider interface {
	// UpdateAllocatedDevices garbage-collects the devices of pods that ended.
	UpdateAllocatedDevices()
	// GetDevices returns the container's devices, one entry per device per NUMA node.
	GetDevices(podUID, containerName string) []*podresourcesv1.ContainerDevices
	// GetAllocatableDevices returns every healthy device, allocated or not.
	GetAllocatableDevices() []*podresourcesv1.ContainerDevices
}

// CPUsProvider knows exclusive CPU assignments (the CPU manager). Optional.
type CPUsProvider interface {
	GetCPUs(podUID, containerName string) []int64
	GetAllocatableCPUs() []int64
}

// MemoryProvider knows memory assignments (the memory manager). Optional.
type MemoryProvider interface {
	GetMemory(podUID, containerName string) []*podresourcesv1.ContainerMemory
	GetAllocatableMemory() []*podresourcesv1.ContainerMemory
}

// DynamicResourcesProvider knows DRA claims. Optional.
type DynamicResourcesProvider interface {
	GetDynamicResources(pod *v1.Pod, container *v1.Container) []*podresourcesv1.DynamicResource
}

// Providers are the sources the server reports from. Pods and Devices are required; the
// others report nothing when nil.
type Providers struct {
	Pods             PodsProvider
	Devices          DevicesProvider
	CPUs             CPUsProvider
	Memory           MemoryProvider
	DynamicResources DynamicResourcesProvider
}

func (p Providers) validate() error {
	var errs []error
	if p.Pods == nil {
		errs = append(errs, errors.New("podresources: a PodsProvider is required"))
	}
	if p.Devices == nil {
		errs = append(errs, errors.New("podresources: a DevicesProvider is required"))
	}
	return errors.Join(errs...)
}

func (p Providers) cpus(podUID, container string) []int64 {
	if p.CPUs == nil {
		return nil
	}
	return p.CPUs.GetCPUs(podUID, container)
}

func (p Providers) memory(podUID, container string) []*podresourcesv1.ContainerMemory {
	if p.Memory == nil {
		return nil
	}
	return p.Memory.GetMemory(podUID, container)
}

func (p Providers) dynamic(pod *v1.Pod, c *v1.Container) []*podresourcesv1.DynamicResource {
	if p.DynamicResources == nil {
		return nil
	}
	return p.DynamicResources.GetDynamicResources(pod, c)
}

// Flatten turns resource → device ID → NUMA nodes into the kubelet's shape: one
// ContainerDevices per device per NUMA node, and one with nil Topology for a device without
// NUMA nodes. Resources, devices and nodes come out sorted, so the answer is deterministic.
func Flatten[M ~map[string]map[string][]int64](devs M) []*podresourcesv1.ContainerDevices {
	var out []*podresourcesv1.ContainerDevices
	resources := make([]string, 0, len(devs))
	for r := range devs {
		resources = append(resources, r)
	}
	sort.Strings(resources)
	for _, res := range resources {
		ids := make([]string, 0, len(devs[res]))
		for id := range devs[res] {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			nodes := append([]int64(nil), devs[res][id]...)
			sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
			if len(nodes) == 0 {
				out = append(out, &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: []string{id}})
				continue
			}
			for _, n := range nodes {
				out = append(out, &podresourcesv1.ContainerDevices{
					ResourceName: res, DeviceIds: []string{id},
					Topology: &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: n}}},
				})
			}
		}
	}
	return out
}

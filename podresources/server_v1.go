package podresources

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// v1Server implements podresources v1 over the providers.
type v1Server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	p       Providers
	metrics *metrics
}

// NewV1Server returns the v1 PodResourcesLister, without rate limiting (Server adds it).
func NewV1Server(p Providers) (podresourcesv1.PodResourcesListerServer, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &v1Server{p: p, metrics: newMetrics()}, nil
}

// List reports every active pod with its restartable init containers and app containers.
// It garbage-collects ended pods' devices first. It never fails.
func (s *v1Server) List(_ context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.metrics.requests.WithLabelValues("v1").Inc()
	s.metrics.list.WithLabelValues("v1").Inc()
	pods := s.p.Pods.GetActivePods()
	s.p.Devices.UpdateAllocatedDevices()
	resp := &podresourcesv1.ListPodResourcesResponse{PodResources: make([]*podresourcesv1.PodResources, 0, len(pods))}
	for _, pod := range pods {
		resp.PodResources = append(resp.PodResources, s.podResources(pod))
	}
	return resp, nil
}

// GetAllocatableResources reports what the node can hand out: healthy devices (allocated
// ones included), allocatable CPUs and memory.
func (s *v1Server) GetAllocatableResources(_ context.Context, _ *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	s.metrics.requests.WithLabelValues("v1").Inc()
	s.metrics.getAllocatable.WithLabelValues("v1").Inc()
	resp := &podresourcesv1.AllocatableResourcesResponse{Devices: s.p.Devices.GetAllocatableDevices()}
	if s.p.CPUs != nil {
		resp.CpuIds = s.p.CPUs.GetAllocatableCPUs()
	}
	if s.p.Memory != nil {
		resp.Memory = s.p.Memory.GetAllocatableMemory()
	}
	return resp, nil
}

// Get reports one pod. A pod that is unknown or terminated is not found.
func (s *v1Server) Get(_ context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	s.metrics.requests.WithLabelValues("v1").Inc()
	s.metrics.get.WithLabelValues("v1").Inc()
	pod, ok := s.p.Pods.GetPodByName(req.PodNamespace, req.PodName)
	if !ok || isTerminal(pod) {
		s.metrics.errorsGet.WithLabelValues("v1").Inc()
		return nil, fmt.Errorf("pod %s in namespace %s not found", req.PodName, req.PodNamespace)
	}
	return &podresourcesv1.GetPodResourcesResponse{PodResources: s.podResources(pod)}, nil
}

// podResources lists the pod's restartable init containers (spec order), then its app
// containers; regular init containers have ended and hold nothing a monitor needs.
func (s *v1Server) podResources(pod *v1.Pod) *podresourcesv1.PodResources {
	pr := &podresourcesv1.PodResources{Name: pod.Name, Namespace: pod.Namespace}
	add := func(c *v1.Container) {
		uid := string(pod.UID)
		pr.Containers = append(pr.Containers, &podresourcesv1.ContainerResources{
			Name:             c.Name,
			Devices:          s.p.Devices.GetDevices(uid, c.Name),
			CpuIds:           s.p.cpus(uid, c.Name),
			Memory:           s.p.memory(uid, c.Name),
			DynamicResources: s.p.dynamic(pod, c),
		})
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return pr
}

func isTerminal(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

package podresources

import (
	"context"

	"k8s.io/kubelet/pkg/apis/podresources/v1alpha1"
)

// v1alpha1Server implements the deprecated v1alpha1 List.
type v1alpha1Server struct {
	v1alpha1.UnimplementedPodResourcesListerServer
	p       Providers
	metrics *metrics
}

// NewV1alpha1Server returns the v1alpha1 PodResourcesLister, without rate limiting.
func NewV1alpha1Server(p Providers) (v1alpha1.PodResourcesListerServer, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &v1alpha1Server{p: p, metrics: newMetrics()}, nil
}

// List reports every known pod (terminated ones too) with its app containers' devices, without
// topology.
func (s *v1alpha1Server) List(_ context.Context, _ *v1alpha1.ListPodResourcesRequest) (*v1alpha1.ListPodResourcesResponse, error) {
	s.metrics.requests.WithLabelValues("v1alpha1").Inc()
	pods := s.p.Pods.GetPods()
	s.p.Devices.UpdateAllocatedDevices()
	resp := &v1alpha1.ListPodResourcesResponse{PodResources: make([]*v1alpha1.PodResources, 0, len(pods))}
	for _, pod := range pods {
		pr := &v1alpha1.PodResources{Name: pod.Name, Namespace: pod.Namespace}
		for _, c := range pod.Spec.Containers {
			cr := &v1alpha1.ContainerResources{Name: c.Name}
			for _, d := range s.p.Devices.GetDevices(string(pod.UID), c.Name) {
				cr.Devices = append(cr.Devices, &v1alpha1.ContainerDevices{ResourceName: d.ResourceName, DeviceIds: d.DeviceIds})
			}
			pr.Containers = append(pr.Containers, cr)
		}
		resp.PodResources = append(resp.PodResources, pr)
	}
	return resp, nil
}

// Package podresources serves the kubelet's podresources gRPC API (v1 List,
// GetAllocatableResources and Get, and the deprecated v1alpha1 List) over small provider
// interfaces, so that GPU exporters and node agents read device assignments from kdm — or from
// any embedding agent — exactly as they do from a kubelet.
//
// Behaviour follows the kubelet v1.36: List reports active pods only and garbage-collects
// ended pods' devices first; containers are the restartable init containers (in spec order)
// followed by the app containers; devices come one entry per device per NUMA node
// (Flatten); Get treats unknown and terminated pods as not found ("pod %s in namespace %s not
// found"); v1alpha1 List reports every pod's app containers without topology. One token bucket
// (100 per second, burst 10) is shared by every method of both versions; a call beyond it gets
// codes.ResourceExhausted "rejected by rate limit". The kubelet_pod_resources_endpoint_*
// counters are kept on the registry the caller passes.
//
// The socket is made as the kubelet makes it: the old socket removed, the directory created
// 0750, a temporary name renamed into place.
package podresources

// Package apipods is the agent's pod source for the API server: the pods bound to one node,
// admitted and reported the kubelet's way.
//
// A Source watches the node's pods through an informer restricted to spec.nodeName and
// reconciles each pod key in one worker against Pods, the small interface of whoever admits
// them: a new active pod is handed to Pods.Track, a pod that is gone, terminal, replaced by a
// pod of the same name or being deleted is untracked, and a pod being deleted is deleted with
// grace period 0 once its devices are released (and its containers, if any ran, are gone).
// Each recorded admission result is published in the pod's status with a strategic merge
// patch guarded by the pod's UID: Running with ready containers (or the states a container
// runtime reports), Pending with the waiting reason while a device plugin is awaited, Failed
// with the kubelet's reason for a rejected pod, each with its event. The owner calls Enqueue
// when a pod's result changes.
package apipods

// Package nodestatus keeps a Node and its Lease current for a device manager, as the
// kubelet's node status loop does: Publisher registers the Node, publishes the device
// resources the manager reports beside the capacity, labels, taints, addresses and nodeInfo
// its Config names, keeps the Ready condition, and renews the Lease in kube-node-lease.
//
// It detects nothing about the host: the agent (agent.Agent, which `kdm run` uses) describes
// its machine and hands the description over in a Config; an embedder such as a
// virtual-kubelet provider fills the Config itself and runs a Publisher beside its
// devicemanager.Manager.
package nodestatus

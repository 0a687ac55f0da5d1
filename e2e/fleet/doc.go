// Package fleet runs many kdm nodes against one real Kubernetes control plane and measures
// what they cost it: N `kdm run --kubeconfig` agents, each a real process with its own root
// directory, kubelet.sock and reference GPU plugin on mock GPUs (sizes differ per node), joined
// to the kube-apiserver, etcd, kube-scheduler and kube-controller-manager of e2e/kubecluster.
//
// A Fleet creates a workload of GPU pods through the API (Deployments and Jobs), which the
// real scheduler places and kdm admits; it samples pods Running and the apiserver's request
// counter over time, measures a steady window (requests per node by verb and resource from the
// apiserver's audit log, which names each node's own identity, cross-checked against
// apiserver_request_total; watches; CPU and memory of every process from /proc), injects
// faults (apiserver restart, etcd restart, nodes killed past the node-monitor grace period, a
// node cut off in its own network namespace) and checks after each that nothing was lost: every
// pod keeps its devices, none is admitted twice, no device is held by two pods.
//
// `make fleet` (cmd/kdm-fleet) writes the figures and pictures of docs/fleet.md; the package's
// test runs a five-node fleet in `make test`.
package fleet

// Package agent is kdm's node agent: it wires a device manager, the podresources server, a pod
// source and admission, and serves /healthz, /livez, /readyz, /metrics and /status over HTTP.
//
// The pod source is a directory of pod manifests (YAML or JSON, one pod per file, like the
// kubelet's static pod path; package manifests), read at start, on every file event and every
// ten seconds. A new pod is admitted — devices are allocated to its init containers, then its app containers —
// and the outcome, with each container's device run options and device health, is written to
// <root-dir>/kdm/pods/<namespace>_<name>_<uid>.json (Config.PodResultsDir). A pod whose allocation fails is rejected with
// the kubelet's reason (UnexpectedAdmissionError) and message ("Allocate failed due to …,
// which is unexpected"). Removing a manifest releases the pod's devices. A file's new content
// is judged only once no process has the file open for writing, and content that makes the file
// another pod (another UID) replaces the running pod only once it has stood unchanged for 5 s,
// so a slow rewrite in place never hands the running pod's devices to another pod.
//
// There is no container runtime: a pod admitted by an earlier run of the agent counts as
// running (its app containers and sidecars), which is what the device manager's restart
// bypass needs. Pods are admitted concurrently, each in its own goroutine, so that a pod whose
// admission is deferred (Policy.DeferAdmission) does not hold up the others; the manager makes
// this safe.
//
// With a Kubernetes client the API server is a pod source too, and a nodestatus.Publisher keeps
// the Node like a kubelet's: capacity detected from the host (or Config.CapacityOverride), with
// allocatable less SystemReserved and KubeReserved (kdm evicts nothing, so no eviction
// threshold is subtracted), the device resources, the kubernetes.io/arch, os and hostname
// labels, addresses, nodeInfo and a Ready condition, written by strategic merge patch, and the
// Lease. Admitted pods are reported Running with every container ready, as no runtime runs
// them. Every timer, ticker and timestamp of the agent reads Config.Clock.
package agent

// Package podruntime runs admitted pods as real containers through a CRI runtime (containerd),
// the way the kubelet's container runtime manager does, and reports their status.
//
// A Runtime is given a pod source (Config.Pods: the pods that should run now) and the device
// manager's run options (Config.RunOptions). Its Run loop relists the runtime every SyncPeriod (or
// sooner after Trigger) and brings each listed pod to its spec: one sandbox on the host network,
// the regular init containers one at a time to a zero exit, restartable init containers (sidecars)
// started and kept, then the app containers, restarted per the pod's restartPolicy with the
// kubelet's crash back-off. Pods the source no longer lists, and kdm-labelled pods it never listed
// (orphans), are stopped and removed: containers first, then the sandbox; only then is OnStopped
// called, and only then may the pod's devices be released. As the kubelet's pod workers do, each
// removed pod is stopped by a goroutine of its own (kill.go): pods removed together stop together,
// each with its own grace period, and no pod's stop waits for another's.
//
// Everything the Runtime creates carries the kubelet's labels (io.kubernetes.pod.uid, ...) and the
// label kdm.io/managed=true; the Runtime never touches a sandbox or container without that label.
// Nothing is kept on disk: after a restart, Run's first pass reconciles with what the runtime holds,
// adopting running containers (never restarting them), finishing half-started pods and removing
// orphans. Run does not stop containers when it returns.
//
// Container configs are built as the kubelet builds them from the device manager's run options:
// devices with their permissions, mounts with read-only, environment, annotations and CDI device
// names (CDI injection needs containerd >= 1.7 with enable_cdi; containerd 1.6 ignores the field).
// From the pod spec: image, command, args, working dir and plain environment values (env from
// ConfigMaps, Secrets or field references is not supported and is ignored). No probes, volumes
// or resource limits are applied.
package podruntime

// Package devicemanager is the kubelet's device manager as a library: it serves the
// device-plugin Registration service on <PluginDir>/kubelet.sock, keeps one endpoint and one
// ListAndWatch stream per registered resource, tracks healthy, unhealthy and allocated
// devices, assigns devices to containers (GetPreferredAllocation, Allocate,
// PreStartContainer), persists assignments in kubelet_internal_checkpoint, and reports
// capacity and allocatable with the stopped-endpoint grace period.
//
// # Using a Manager
//
// New validates a Config and builds a Manager; ParsePolicy, LookupKubelet, KubeletPolicy (the
// newest kubelet) and KDMPolicy give its Policy, and KubeletVersions lists the kubelet minors
// kdm reproduces. The methods, by the caller that needs them:
//
//   - Lifecycle (the embedder's main loop): Start with the embedder's Sources (its pods, the
//     containers running at start, its own record of the assignments), Stop, HealthCheck (the
//     kubelet's "device-plugin" healthz check), SocketPath, CheckpointPath, Policy.
//   - Admission (the pod admit handler and topology manager): GetTopologyHints and
//     GetPodTopologyHints, then Allocate for each container, init containers first;
//     GetDeviceRunContainerOptions when a container starts; UpdateAllocatedDevices to release
//     pods that are gone; GetContainerAllocations to keep the embedder's own copy of the
//     assignments; WaitForCheckpointWrites before reporting a change as durable.
//   - Node status: GetCapacity (capacity, allocatable and removed resources), DeviceChanges to
//     publish as soon as they move, ShouldResetExtendedResourceCapacity when registering the
//     Node, SanitizeNodeAllocatable for pods that already hold devices, Updates and
//     UpdateAllocatedResourcesStatus for device health in pod status.
//   - podresources: GetDevices and GetAllocatableDevices.
//   - Status pages and debugging: Resources, a consistent snapshot of every resource.
//
// The device and assignment state itself, and every decision made on it, is the pure core in
// package internal/state; the Manager feeds it from the plugins and the embedder and acts
// on its answers.
//
// # Behaviour
//
// With the zero Policy the manager replays the kubelet v1.36 device manager, check for check
// and error string for error string; the other rows of KubeletVersions replay the other
// minors. The kubelet v1.37 differs in plugin re-registration (a Register on a connected socket is refused, a connected instance
// takes over when another disconnects) and in-place resizes (AllocateFor). Under every policy
// these defects are fixed:
//
//   - Registrations are keyed by plugin instance: a second registration for a resource replaces
//     the first, capacity does not dip, and the old instance's stream ending never disconnects
//     the new one. As with the kubelet, the old instance's stream is left open (its lists are
//     ignored; up to 2 per resource) until the plugin or Stop ends it, so a plugin that exits
//     on a closed stream survives registering twice. A failed re-registration leaves the
//     working instance in place; under the kubelet v1.37's same-socket refusal the working
//     instance still disconnects when its stream ends (the kubelet v1.37 orphans it).
//   - Allocation is transactional. Devices are reserved while the plugin's RPCs run without the
//     lock; garbage collection cannot release a reservation, and a failure anywhere releases
//     every reservation of the call and records nothing (no leaked "Available: 0").
//   - Every shared map is guarded by the one manager mutex; a device that vanished from the
//     plugin's list yields an error, never a panic.
//   - A Register endpoint that would leave the plugin directory ("../x", "/x", or a symlink to
//     a socket or directory elsewhere) is refused without being dialled; the resolved path is
//     dialled. A socket that a live endpoint serves for one resource is refused to any other.
//   - A Register waits for the plugin's socket to answer before it dials it, so sockets that
//     never answer hold no dial. A few calls dial at once, per resource and in all, and a
//     bounded number wait for an answer; past a bound an older call of the busiest user and
//     control group is cancelled with ResourceExhausted. Repeated registration log lines are
//     rate-limited.
//   - Checkpoint writes are durable (file and directory fsync) and never go back in time.
//
// Policy fields switch on kdm's improvements (deferred admission, keeping completed init
// containers' devices across a restart, a GetPreferredAllocation fallback); endpoint.Config
// bounds the plugin RPCs.
//
// # Embedding: readiness, logging and restarts
//
// WaitForResource blocks until a resource's plugin has registered and sent its first device
// list; an embedder that must not admit device pods before then (a provider that starts
// with its plugins) waits for it instead of polling GetCapacity.
//
// The manager logs through Config.Logger, a logr.Logger; the zero value falls back to klog's
// global logger, which writes to stderr. An embedder with its own logging passes its logger
// (klog.FromContext, a funcr or zapr logger); Config.Registerer likewise decides where the
// metrics go, and nothing is registered globally.
//
// A restart of the embedder (a new Manager on the same PluginDir) is the kubelet's restart:
//
//   - Start reads the checkpoint and restores every assignment in it; no plugin is called.
//     Pass the containers the runtime still runs as Sources.RunningContainers and, if the
//     embedder keeps its own copy of the assignments (GetContainerAllocations), that copy as
//     Sources.RecoveredAllocations: it is restored when the checkpoint is missing or
//     unusable, and compared with one that decodes (Policy.KeepRecordedDevices).
//   - Admit again every pod the embedder keeps, calling Allocate for each container in order,
//     as the kubelet does when it re-admits its pods after a restart. A container whose
//     restored assignment matches its request keeps its devices without a plugin call; a
//     running container listed in RunningContainers keeps them even before its plugin has
//     registered again, as long as SourcesReady reports false. Do not skip the calls: they
//     are what tells the manager which restored pods are still wanted.
//   - Call GetDeviceRunContainerOptions only for containers that are started after the
//     restart; a running container already has its devices.
//   - Once SourcesReady reports true, assignments of pods no longer in ActivePods are
//     released at the next Allocate or UpdateAllocatedDevices.
//
// # Concurrency
//
// One mutex (mu) guards all device and assignment state and is never held across an RPC or
// a disk write. Lifecycle fields have their own mutex. Every goroutine (the registration
// server, one per endpoint stream, the plugin watcher) is owned by the context given to Start
// and joined by Stop.
package devicemanager

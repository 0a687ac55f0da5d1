// Package podresult is kdm's durable per-pod record: the PodResult the agent writes for every
// pod it admits, rejects or holds pending, its versioned JSON schema (kdm.io/v1, documented in
// docs/pod-results.md, with the unversioned form of earlier versions still read), and the
// results directory that holds one file per pod.
//
// A result says how admission ended and, per container, the device run options, device health,
// requests and the devices as the checkpoint holds them: the second copy of the assignments
// from which the device manager restores them when the checkpoint is lost. RuntimeStatus is
// the part that says what runs of the pod.
//
// Write replaces a pod's file atomically (temporary file, fsync, rename) under the name Path
// gives it, which is always one plain file name inside the directory whatever the pod's
// metadata holds. ReadDir and ScanDir read every result back, skipping files that are not
// usable results (ScanDir also says why); ReadFile reads one and refuses symbolic links and
// non-regular files. Migrate moves the results an earlier kdm wrote beside the kubelet's pod
// directories into their own directory. Nothing here holds state or starts goroutines: the
// caller serialises the writes of one pod.
package podresult

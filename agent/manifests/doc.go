// Package manifests is the agent's pod source for a directory of pod manifests (YAML or JSON,
// one pod per file), like the kubelet's static pod path.
//
// Watch reads the directory at start, on every file event and every resync period, and hands
// each file's pod to Pods, the small interface of whoever admits them; a pod whose file is
// gone, or now holds another pod, is untracked. A file that is empty, partially written,
// unparseable, too large (MaxFileSize) or not a regular file changes nothing: the pod of its
// last good version stays. A file's new content is judged only once no process has the file
// open for writing, and content that makes the file another pod (another UID) replaces the
// running pod only once it has stood unchanged for 5 s, so a slow rewrite in place never hands
// the running pod's devices to another pod. Validate is the check a manifest's pod passes
// before admission; Read is a one-shot read of the directory.
package manifests

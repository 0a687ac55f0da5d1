// Package e2e holds kdm's end-to-end tests: they build the kdm and kdm-nvml-plugin binaries,
// run them as real processes on unix sockets in a temp dir, kill them with SIGKILL, and read
// back what they wrote (pod results, the checkpoint, podresources, /status).
package e2e

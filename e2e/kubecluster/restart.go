package kubecluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// The components a Cluster runs, as Restart and PID name them.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	Scheduler         = "kube-scheduler"
	ControllerManager = "kube-controller-manager"
)

func (c *Cluster) component(name string) (*Process, error) {
	s := map[string]*Process{Etcd: c.etcd, APIServer: c.api, Scheduler: c.scheduler, ControllerManager: c.controllerManager}[name]
	if s == nil {
		return nil, fmt.Errorf("kubecluster: no running component %q", name)
	}
	return s, nil
}

// PID returns the process ID of a running component, or an error naming the component the
// cluster does not run.
func (c *Cluster) PID(name string) (int, error) {
	s, err := c.component(name)
	if err != nil {
		return 0, err
	}
	return s.PID(), nil
}

// Restart stops a component (SIGTERM, SIGKILL after five seconds) and starts it again with the
// same flags, ports and data; after the apiserver it waits for /readyz. Clients reconnect on
// their own: the restart is what a control-plane upgrade or crash looks like to them. Restart
// must not run concurrently with Stop or another Restart.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	s, err := c.component(name)
	if err != nil {
		return err
	}
	s.Stop()
	again, err := StartProcess(s.dir, s.name, s.bin, s.args...)
	if err != nil {
		return err
	}
	switch name {
	case Etcd:
		c.etcd = again
	case APIServer:
		c.api = again
		return c.waitReady(ctx, defaultReadyTimeout)
	case Scheduler:
		c.scheduler = again
	case ControllerManager:
		c.controllerManager = again
	}
	return nil
}

// defaultReadyTimeout bounds the wait for a restarted apiserver.
const defaultReadyTimeout = time.Minute

// AuditLogPath is the apiserver's audit log with Options.AuditLog: one JSON event per line.
func (c *Cluster) AuditLogPath() string { return filepath.Join(c.dir, "audit.log") }

// writeAuditPolicy writes a policy that records every request at level Metadata once its
// response is complete (a watch once it starts), and returns the apiserver's audit flags.
func writeAuditPolicy(dir string) ([]string, error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	const body = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`
	if err := os.WriteFile(policy, []byte(body), 0o600); err != nil {
		return nil, err
	}
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + filepath.Join(dir, "audit.log"),
		"--audit-log-format=json", "--audit-log-maxsize=0"}, nil
}

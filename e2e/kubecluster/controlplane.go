package kubecluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The identities of the scheduler and the controller-manager. The scheduler's is the one the
// API server's bootstrap RBAC policy grants the scheduler's permissions to. The
// controller-manager runs every controller under its own identity (no per-controller service
// account credentials, which would need the token controller), so it is in system:masters.
const (
	SchedulerUser         = "system:kube-scheduler"
	ControllerManagerUser = "system:kube-controller-manager"
)

// DefaultControllers are the controllers the controller-manager runs when
// Options.Controllers is empty: what Deployments and the nodes' health need, nothing more.
var DefaultControllers = []string{"deployment-controller", "replicaset-controller", "node-lifecycle-controller"}

// DefaultNodeMonitorGracePeriod is how long the node lifecycle controller lets a Node go
// without a heartbeat (Lease renewal or status update) before it marks it not ready, when
// Options.NodeMonitorGracePeriod is zero. It is shorter than a real cluster's 50 s so that a
// test sees the effect of a silent node within its time, and longer than two of kdm's 10 s
// Lease renewals so that a busy test machine does not flap the Node.
const DefaultNodeMonitorGracePeriod = 25 * time.Second

// controlPlaneIdentities are the token identities (user, name, groups) ControlPlane adds.
func controlPlaneIdentities() [][3]string {
	return [][3]string{
		{SchedulerUser, SchedulerUser, ""},
		{ControllerManagerUser, ControllerManagerUser, "system:masters"},
	}
}

// startControlPlane starts kube-scheduler and kube-controller-manager against the running
// apiserver and waits until both answer /healthz.
func (c *Cluster) startControlPlane(ctx context.Context, opts Options) error {
	controllers := opts.Controllers
	if len(controllers) == 0 {
		controllers = DefaultControllers
	}
	grace := opts.NodeMonitorGracePeriod
	if grace <= 0 {
		grace = DefaultNodeMonitorGracePeriod
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	schedKubeconfig := filepath.Join(opts.Dir, "kube-scheduler.kubeconfig")
	cmKubeconfig := filepath.Join(opts.Dir, "kube-controller-manager.kubeconfig")
	for user, path := range map[string]string{SchedulerUser: schedKubeconfig, ControllerManagerUser: cmKubeconfig} {
		if err := c.WriteKubeconfig(user, path); err != nil {
			return err
		}
	}
	c.scheduler, err = StartProcess(opts.Dir, "kube-scheduler", opts.Binaries.Scheduler,
		"--kubeconfig="+schedKubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[0]),
		"--profiling=false",
		"--v=2")
	if err != nil {
		return err
	}
	c.controllerManager, err = StartProcess(opts.Dir, "kube-controller-manager", opts.Binaries.ControllerManager,
		"--kubeconfig="+cmKubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[1]),
		"--controllers="+strings.Join(controllers, ","),
		"--node-monitor-period=1s",
		"--node-monitor-grace-period="+grace.String(),
		"--use-service-account-credentials=false",
		"--profiling=false",
		"--v=2")
	if err != nil {
		return err
	}
	for _, w := range []struct {
		s    *Process
		port int
	}{{c.scheduler, ports[0]}, {c.controllerManager, ports[1]}} {
		if err := c.waitHealthz(ctx, w.s, w.port, opts.ReadyTimeout); err != nil {
			return err
		}
	}
	return nil
}

// waitHealthz polls https://127.0.0.1:port/healthz (a self-signed serving certificate; the
// path needs no credentials) until it answers ok, the server exits, or the timeout passes.
func (c *Cluster) waitHealthz(ctx context.Context, s *Process, port int, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a test server's self-signed certificate on loopback
	}}
	defer client.CloseIdleConnections()
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
	deadline := time.Now().Add(timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if s.Exited() {
			return fmt.Errorf("%s exited before it was healthy:\n%s", s.name, c.Logs(4000))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy after %s:\n%s", s.name, timeout, c.Logs(4000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

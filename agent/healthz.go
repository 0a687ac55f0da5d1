package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/devicemanager"
)

// Health check names.
const (
	CheckPing         = "ping"
	CheckDevicePlugin = devicemanager.HealthCheckName // the manager's registration server
	CheckPodResources = "podresources"                // the podresources socket accepts connections
	CheckPodSources   = "pod-sources"                 // every pod source's first listing is admitted
	CheckAPIServer    = "apiserver"                   // the last API server sync succeeded
)

// podResourcesDialTimeout bounds the podresources check's connection attempt.
const podResourcesDialTimeout = time.Second

// Checks returns the agent's health checks: ping, device-plugin and podresources for
// liveness, and, for readiness only, pod-sources and, with a KubeClient, apiserver.
func (a *Agent) Checks() []statusapi.HealthCheck {
	checks := []statusapi.HealthCheck{
		{Name: CheckPing, Check: func() error { return nil }},
		{Name: CheckDevicePlugin, Check: a.manager.HealthCheck},
		{Name: CheckPodResources, Check: a.checkPodResources},
		{Name: CheckPodSources, Ready: true, Check: func() error {
			if !a.ready.Load() {
				return errors.New("the pod sources' first listings are not admitted yet")
			}
			return nil
		}},
	}
	if a.cfg.KubeClient != nil {
		checks = append(checks, statusapi.HealthCheck{Name: CheckAPIServer, Ready: true, Check: a.checkAPIServer})
	}
	return checks
}

// checkPodResources connects to the podresources socket.
func (a *Agent) checkPodResources() error {
	d := net.Dialer{Timeout: podResourcesDialTimeout}
	c, err := d.DialContext(context.Background(), "unix", a.cfg.PodResourcesSocket())
	if err != nil {
		return fmt.Errorf("podresources socket: %w", err)
	}
	return c.Close()
}

// checkAPIServer fails until the Node is published and while the last write or listing of
// the node publisher or the pod source failed.
func (a *Agent) checkAPIServer() error {
	p := a.publisher.Load()
	if p == nil {
		return errors.New("the node publisher is not running")
	}
	var errs []error
	if err := p.Healthy(); err != nil {
		errs = append(errs, err)
	}
	if a.kube != nil {
		if err := a.kube.healthy(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

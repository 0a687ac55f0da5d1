package agent

import (
	"context"
	"net"
	"sort"

	"github.com/kdm-project/kdm/agent/statusapi"
)

// serveHTTP serves the agent's HTTP API (statusapi: health, metrics, /status and the status
// page) on HealthzBindAddress until ctx ends or the server fails.
func (a *Agent) serveHTTP(ctx context.Context) error {
	lis, err := net.Listen("tcp", a.cfg.HealthzBindAddress)
	if err != nil {
		return err
	}
	return statusapi.Serve(ctx, lis, a, statusapi.Options{Registry: a.cfg.Registry, Clock: a.clock, Logger: a.log})
}

// Status reports the node's device resources and every pod's admission outcome. A resource
// removed after its plugin's grace period is published at 0, as the kubelet does, unless the
// policy drops removed resources.
func (a *Agent) Status() statusapi.NodeStatus {
	c, al, removed := a.manager.GetCapacity()
	st := statusapi.NodeStatus{Capacity: map[string]int64{}, Allocatable: map[string]int64{}, Removed: removed,
		Runtime: a.containers.info()}
	for name, q := range c {
		st.Capacity[string(name)] = q.Value()
	}
	for name, q := range al {
		st.Allocatable[string(name)] = q.Value()
	}
	if !a.manager.Policy().DropRemovedResources {
		for _, r := range removed {
			st.Capacity[r], st.Allocatable[r] = 0, 0 // the kubelet keeps them at 0
		}
	}
	a.mu.Lock()
	for _, r := range a.results {
		st.Pods = append(st.Pods, r)
	}
	a.mu.Unlock()
	sort.Slice(st.Pods, func(i, j int) bool {
		if st.Pods[i].Namespace != st.Pods[j].Namespace {
			return st.Pods[i].Namespace < st.Pods[j].Namespace
		}
		return st.Pods[i].Name < st.Pods[j].Name
	})
	return st
}

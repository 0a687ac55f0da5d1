package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NodeStatus is what /status serves: the device resources as the kubelet would publish them
// in the Node's status, and the pods' admission outcomes.
type NodeStatus struct {
	Capacity    map[string]int64 `json:"capacity"`
	Allocatable map[string]int64 `json:"allocatable"`
	Removed     []string         `json:"removed,omitempty"`
	Pods        []*PodResult     `json:"pods"`
}

// serveHTTP serves /healthz, /livez and /readyz (healthz.go), /metrics, /status and the status
// page (/, page.go) until ctx ends or the server fails. On ctx end it shuts down gracefully for
// at most httpShutdownTimeout, then closes the remaining connections hard, so slow clients
// cannot hold the agent's stop.
func (a *Agent) serveHTTP(ctx context.Context) error {
	mux := http.NewServeMux()
	healthHandlers(mux, a.Checks())
	mux.Handle("/metrics", promhttp.HandlerFor(a.cfg.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.Status())
	})
	if err := a.pageHandlers(ctx, mux); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", a.cfg.HealthzBindAddress)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	a.log.Info("Serving HTTP", "address", lis.Addr().String())
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served: // failed on its own
		_ = srv.Close()
		return fmt.Errorf("serving HTTP on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		a.log.Info("HTTP shutdown timed out, closing the remaining connections", "timeout", httpShutdownTimeout, "err", err)
	}
	_ = srv.Close() // Shutdown leaves connections it could not drain open; end them
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving HTTP on %s: %w", lis.Addr(), err)
	}
	return nil
}

// httpShutdownTimeout bounds the graceful part of the HTTP server's shutdown.
const httpShutdownTimeout = 5 * time.Second

// Status reports the node's device resources and every pod's admission outcome. A resource
// removed after its plugin's grace period is published at 0, as the kubelet does, unless the
// policy drops removed resources.
func (a *Agent) Status() NodeStatus {
	c, al, removed := a.manager.GetCapacity()
	st := NodeStatus{Capacity: map[string]int64{}, Allocatable: map[string]int64{}, Removed: removed}
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

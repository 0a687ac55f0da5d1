package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/kdm-project/kdm/agent/podresult"
)

// NodeStatus is what /status serves: the device resources as the kubelet would publish them
// in the Node's status, and the pods' admission outcomes.
type NodeStatus struct {
	Capacity    map[string]int64       `json:"capacity"`
	Allocatable map[string]int64       `json:"allocatable"`
	Removed     []string               `json:"removed,omitempty"`
	Pods        []*podresult.PodResult `json:"pods"`
	// Runtime says whether kdm runs the pods' containers, and through which runtime.
	Runtime RuntimeInfo `json:"runtime"`
}

// Bounds of the agent's HTTP server (Config.HealthzBindAddress). Whatever its clients send or
// fail to read, the server holds at most HTTPMaxConnections connections, each with at most
// HTTPMaxHeaderBytes of request header, for bounded times; the status page's streams share one
// state computation (stream.go), so neither memory nor admission depends on how many clients
// there are or how they behave.
const (
	// HTTPMaxHeaderBytes bounds a request's header, request line (and so the query string)
	// included. A larger header gets 431 Request Header Fields Too Large.
	HTTPMaxHeaderBytes = 64 << 10
	// HTTPMaxConnections bounds the connections served at once. Past it new connections wait,
	// unaccepted, in the listen backlog until one ends, so probes may queue behind a flood of
	// clients; the timeouts below bound how long a client that sends or reads nothing stays.
	HTTPMaxConnections = 128
	// HTTPMaxStreams bounds the /api/stream clients served at once, well below
	// HTTPMaxConnections. Past it a stream is answered 503 Service Unavailable.
	HTTPMaxStreams = 32
	// HTTPReadHeaderTimeout bounds reading a request's header.
	HTTPReadHeaderTimeout = 5 * time.Second
	// HTTPReadTimeout bounds reading a whole request (the API has no request bodies).
	HTTPReadTimeout = 10 * time.Second
	// HTTPWriteTimeout bounds writing a response, and each event of a stream: a client that
	// stops reading is dropped when it runs out.
	HTTPWriteTimeout = 10 * time.Second
	// HTTPIdleTimeout closes a kept-alive connection that sends no next request.
	HTTPIdleTimeout = 30 * time.Second
	// httpMaxScrapes bounds the /metrics requests served at once; more get 503.
	httpMaxScrapes = 4
)

// httpLimits are the bounds serveHTTPOn applies; tests shrink them.
type httpLimits struct {
	maxHeaderBytes, maxConnections, maxStreams                int
	readHeaderTimeout, readTimeout, writeTimeout, idleTimeout time.Duration
}

// defaultHTTPLimits are the bounds of kdm's HTTP server.
var defaultHTTPLimits = httpLimits{
	maxHeaderBytes:    HTTPMaxHeaderBytes,
	maxConnections:    HTTPMaxConnections,
	maxStreams:        HTTPMaxStreams,
	readHeaderTimeout: HTTPReadHeaderTimeout,
	readTimeout:       HTTPReadTimeout,
	writeTimeout:      HTTPWriteTimeout,
	idleTimeout:       HTTPIdleTimeout,
}

// serveHTTP serves /healthz, /livez and /readyz (healthz.go), /metrics, /status and the status
// page (/, page.go) on HealthzBindAddress until ctx ends or the server fails, within
// defaultHTTPLimits.
func (a *Agent) serveHTTP(ctx context.Context) error {
	lis, err := net.Listen("tcp", a.cfg.HealthzBindAddress)
	if err != nil {
		return err
	}
	return a.serveHTTPOn(ctx, lis, defaultHTTPLimits)
}

// serveHTTPOn is serveHTTP on lis, which it closes, within lim. On ctx end it shuts down
// gracefully for at most httpShutdownTimeout, then closes the remaining connections hard, so
// slow clients cannot hold the agent's stop. It returns once the server and the status page's
// stream goroutine have ended.
func (a *Agent) serveHTTPOn(ctx context.Context, lis net.Listener, lim httpLimits) error {
	streams := newStateStreams(a, lim.maxStreams, lim.writeTimeout)
	mux := http.NewServeMux()
	healthHandlers(mux, a.Checks())
	mux.Handle("/metrics", promhttp.HandlerFor(a.cfg.Registry, promhttp.HandlerOpts{MaxRequestsInFlight: httpMaxScrapes}))
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.Status())
	})
	if err := a.pageHandlers(mux, streams); err != nil {
		_ = lis.Close()
		return err
	}
	srv := &http.Server{
		Handler:           mux,
		MaxHeaderBytes:    lim.maxHeaderBytes,
		ReadHeaderTimeout: lim.readHeaderTimeout,
		ReadTimeout:       lim.readTimeout,
		WriteTimeout:      lim.writeTimeout,
		IdleTimeout:       lim.idleTimeout,
	}
	sctx, stopStreams := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		streams.run(sctx)
	}()
	defer func() {
		stopStreams()
		wg.Wait()
	}()
	served := make(chan error, 1)
	a.log.Info("Serving HTTP", "address", lis.Addr().String(), "maxConnections", lim.maxConnections, "maxStreams", lim.maxStreams)
	go func() { served <- srv.Serve(netutil.LimitListener(lis, lim.maxConnections)) }()
	select {
	case err := <-served: // failed on its own
		_ = srv.Close()
		return fmt.Errorf("serving HTTP on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
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
	st := NodeStatus{Capacity: map[string]int64{}, Allocatable: map[string]int64{}, Removed: removed,
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

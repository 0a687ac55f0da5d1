package statusapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Source gives the server what it serves. *agent.Agent implements it. Its methods must be
// safe for concurrent use; the server calls them from its handlers and its stream goroutine.
type Source interface {
	// Status is what /status serves.
	Status() NodeStatus
	// PageState is what /api/state serves and /api/stream pushes.
	PageState() PageState
	// Checks are the health checks; the server takes them once, when it starts.
	Checks() []HealthCheck
	// PageChanges returns a channel closed at the next change of what PageState shows. The
	// streams push the state again at each close, and at least every second without one.
	PageChanges() <-chan struct{}
}

// Options are what Serve needs besides the Source.
type Options struct {
	// Registry is what /metrics serves.
	Registry prometheus.Gatherer
	// Clock paces the streams (zero: the real clock). Network deadlines follow the wall
	// clock whatever it is.
	Clock clock.Clock
	// Logger logs the server's start, a shutdown cut short and failures to encode the state.
	Logger klog.Logger
	// Limits bound the server (zero: DefaultLimits).
	Limits Limits
}

// Bounds of kdm's HTTP server. Whatever its clients send or fail to read, the server holds at
// most HTTPMaxPendingConnections connections whose request header is still coming, each with
// at most a few KiB of it, and HTTPMaxConnections served connections other than health probes,
// each with at most HTTPMaxHeaderBytes of request header, for bounded times; health probes are
// read as soon as they arrive and answered whatever the load (admission.go); the status page's
// streams share one state computation (stream.go), so neither memory nor the Source's work
// depends on how many clients there are or how they behave.
const (
	// HTTPMaxHeaderBytes bounds a request's header, request line (and so the query string)
	// included. A larger header gets 431 Request Header Fields Too Large.
	HTTPMaxHeaderBytes = 64 << 10
	// HTTPMaxConnections bounds the connections served at once other than health probes
	// (/healthz, /livez, /readyz), which are always served and closed after their answer.
	// Past it a new request gets 503 Service Unavailable with Retry-After; the timeouts below
	// bound how long a client that sends or reads nothing stays.
	HTTPMaxConnections = 128
	// HTTPMaxPendingConnections bounds the connections whose request header is still coming.
	// Past it the oldest of the client address holding the most is closed. Each costs a
	// goroutine and at most 8 KiB, for at most HTTPReadHeaderTimeout.
	HTTPMaxPendingConnections = 2048
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
	// httpShutdownTimeout bounds the graceful part of the server's shutdown.
	httpShutdownTimeout = 5 * time.Second
)

// Limits are the bounds Serve applies. DefaultLimits are kdm's; tests shrink them. A zero
// MaxPendingConnections means HTTPMaxPendingConnections.
type Limits struct {
	MaxHeaderBytes, MaxConnections, MaxStreams                int
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxPendingConnections                                     int
}

// DefaultLimits are the bounds of kdm's HTTP server, the HTTP* constants.
var DefaultLimits = Limits{
	MaxHeaderBytes:        HTTPMaxHeaderBytes,
	MaxConnections:        HTTPMaxConnections,
	MaxStreams:            HTTPMaxStreams,
	ReadHeaderTimeout:     HTTPReadHeaderTimeout,
	ReadTimeout:           HTTPReadTimeout,
	WriteTimeout:          HTTPWriteTimeout,
	IdleTimeout:           HTTPIdleTimeout,
	MaxPendingConnections: HTTPMaxPendingConnections,
}

// Serve serves /healthz, /livez and /readyz (healthz.go), /metrics, /status and the status
// page (/, page.go) from src on lis, which it closes, within opts.Limits, until ctx ends or the
// server fails. On ctx end it shuts down gracefully for at most httpShutdownTimeout, then
// closes the remaining connections hard, so slow clients cannot hold the caller's stop. It
// returns once the server and the streams' goroutine have ended: nil after ctx ended, else
// why the server failed.
func Serve(ctx context.Context, lis net.Listener, src Source, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	lim := opts.Limits
	if lim == (Limits{}) {
		lim = DefaultLimits
	}
	if lim.MaxPendingConnections <= 0 {
		lim.MaxPendingConnections = HTTPMaxPendingConnections
	}
	log := opts.Logger
	streams := newStateStreams(src, opts.Clock, log, lim.MaxStreams, lim.WriteTimeout)
	mux := http.NewServeMux()
	healthHandlers(mux, src.Checks())
	mux.Handle("/metrics", promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{MaxRequestsInFlight: httpMaxScrapes}))
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(src.Status())
	})
	if err := pageHandlers(mux, src, streams); err != nil {
		_ = lis.Close()
		return err
	}
	srv := &http.Server{
		Handler:           probeClose(mux),
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
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
	log.Info("Serving HTTP", "address", lis.Addr().String(), "maxConnections", lim.MaxConnections,
		"maxPendingConnections", lim.MaxPendingConnections, "maxStreams", lim.MaxStreams)
	admitted := newAdmitListener(lis, lim, log)
	defer admitted.wait()
	defer func() { _ = admitted.Close() }()
	go func() { served <- srv.Serve(admitted) }()
	select {
	case err := <-served: // failed on its own
		_ = srv.Close()
		return fmt.Errorf("serving HTTP on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Info("HTTP shutdown timed out, closing the remaining connections", "timeout", httpShutdownTimeout, "err", err)
	}
	_ = srv.Close() // Shutdown leaves connections it could not drain open; end them
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving HTTP on %s: %w", lis.Addr(), err)
	}
	return nil
}

// probeClose makes the server close a connection after answering a health probe on it, so
// that probes, which admission lets in whatever the load, never stay as idle connections.
func probeClose(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isProbePath(r.URL.Path) {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

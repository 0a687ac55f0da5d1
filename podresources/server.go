package podresources

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubelet/pkg/apis/podresources/v1alpha1"
)

// Server serves podresources v1 and v1alpha1 on one gRPC server, rate limited like the
// kubelet's.
type Server struct {
	grpc                *grpc.Server
	log                 klog.Logger
	gracefulStopTimeout time.Duration
}

// NewServer builds the gRPC server with both API versions and the rate-limit interceptor. It
// fails with cfg.Validate's error if cfg is invalid, or if the metrics cannot be registered.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	met := newMetrics()
	if cfg.Registry != nil {
		if err := met.register(cfg.Registry); err != nil {
			return nil, fmt.Errorf("registering podresources metrics: %w", err)
		}
	}
	var opts []grpc.ServerOption
	if cfg.QPS > 0 {
		opts = append(opts, grpc.UnaryInterceptor(rateLimiter(cfg.QPS, cfg.Burst)))
	}
	s := grpc.NewServer(opts...)
	podresourcesv1.RegisterPodResourcesListerServer(s, &v1Server{p: cfg.Providers, metrics: met})
	v1alpha1.RegisterPodResourcesListerServer(s, &v1alpha1Server{p: cfg.Providers, metrics: met})
	return &Server{grpc: s, log: cfg.Logger.WithName("podresources"), gracefulStopTimeout: cfg.GracefulStopTimeout}, nil
}

// ErrRateLimited is the status every call gets while the token bucket is empty.
var ErrRateLimited = status.Error(codes.ResourceExhausted, "rejected by rate limit")

func rateLimiter(qps float64, burst int) grpc.UnaryServerInterceptor {
	limiter := rate.NewLimiter(rate.Limit(qps), burst)
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !limiter.Allow() {
			return nil, ErrRateLimited
		}
		return handler(ctx, req)
	}
}

// Serve listens on socketPath (see Listen) and serves until ctx ends or the gRPC server fails
// on its own. When ctx ends it stops gracefully: no new connections or calls are accepted and
// calls in progress may finish, for at most the configured GracefulStopTimeout; then it closes
// every connection hard. Serve therefore returns in bounded time whatever clients do, including
// clients that never read their responses. It returns nil after a stop caused by ctx, and the
// serving error otherwise. Serve may be called once per Server.
func (s *Server) Serve(ctx context.Context, socketPath string) error {
	lis, err := Listen(socketPath)
	if err != nil {
		return err
	}
	s.log.Info("Serving podresources", "path", socketPath)
	return s.serve(ctx, lis)
}

// serve serves on lis until ctx ends or gRPC's Serve returns, then stops the server.
func (s *Server) serve(ctx context.Context, lis net.Listener) error {
	served := make(chan error, 1)
	go func() { served <- s.grpc.Serve(lis) }()
	select {
	case err := <-served:
		// gRPC gave up on its own (the listener failed): stop hard so that no connection
		// outlives Serve, and report why.
		s.grpc.Stop()
		if err == nil {
			err = errors.New("gRPC server stopped unexpectedly")
		}
		return fmt.Errorf("serving podresources: %w", err)
	case <-ctx.Done():
	}
	s.stop()
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serving podresources: %w", err)
	}
	return nil
}

// stop stops the gRPC server gracefully, and hard once the graceful stop has taken longer than
// s.gracefulStopTimeout. It returns when every connection is closed.
func (s *Server) stop() {
	if s.gracefulStopTimeout < 0 {
		s.grpc.Stop()
		return
	}
	graceful := make(chan struct{})
	go func() {
		defer close(graceful)
		s.grpc.GracefulStop()
	}()
	timer := time.NewTimer(s.gracefulStopTimeout)
	defer timer.Stop()
	select {
	case <-graceful:
		return
	case <-timer.C:
	}
	s.log.Info("Graceful stop of podresources timed out, closing the remaining connections", "timeout", s.gracefulStopTimeout)
	// Stop closes every connection, which also lets the pending GracefulStop return.
	s.grpc.Stop()
	<-graceful
}

// Listen creates the socket the kubelet's way: remove an old socket, create the directory
// (0750), listen on a temporary name in the same directory and rename it into place, so a
// client never connects to a half-made socket.
func Listen(socketPath string) (net.Listener, error) {
	if err := os.Remove(socketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing old podresources socket %s: %w", socketPath, err)
	}
	dir := filepath.Dir(socketPath)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("creating podresources socket directory: %w", err)
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d.tmp", filepath.Base(socketPath), os.Getpid()))
	_ = os.Remove(tmp)
	lis, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", tmp, err)
	}
	if ul, ok := lis.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	if err := os.Rename(tmp, socketPath); err != nil {
		_ = lis.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("moving podresources socket into place: %w", err)
	}
	return &renamedListener{Listener: lis, path: socketPath}, nil
}

// renamedListener removes the socket at its final path on Close.
type renamedListener struct {
	net.Listener
	path string
	once sync.Once
}

func (l *renamedListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { _ = os.Remove(l.path) })
	return err
}

// SocketPath is the kubelet's podresources socket under a root directory.
func SocketPath(rootDir string) string {
	return filepath.Join(rootDir, "pod-resources", "kubelet.sock")
}

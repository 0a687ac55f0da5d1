package deviceplugin

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	// registerRetryMax is the longest wait between two attempts to connect to a missing or
	// refusing kubelet.sock while a Register waits for it. Connecting to a local unix socket
	// costs microseconds, so a short cap is cheap and finds a starting kubelet quickly.
	registerRetryMax = 200 * time.Millisecond
)

// registerBackoff paces connection attempts to kubelet.sock: from 20 ms up to
// registerRetryMax, with gRPC's usual growth and jitter.
var registerBackoff = backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: registerRetryMax}

// register makes one Register call on KubeletSocket, through Config.RegisterInterceptor if
// set, bounded by RegisterTimeout and ctx. The call waits for the socket to accept connections,
// re-trying a refused or missing kubelet.sock every registerRetryMax at most, so that a
// kubelet that starts while we wait is found within that time rather than after gRPC's
// default backoff (up to seconds). Our own socket is always served again, if the kubelet's
// start-up cleanup deleted it, before a Register names it. On success it counts the
// registration and wakes waiters. Errors wrap ErrRegistration and the gRPC error.
func (p *Plugin) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RegisterTimeout)
	defer cancel()
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: registerBackoff, MinConnectTimeout: p.cfg.RegisterTimeout}),
	}
	if p.cfg.RegisterInterceptor != nil {
		opts = append(opts, grpc.WithUnaryInterceptor(p.cfg.RegisterInterceptor))
	}
	conn, err := grpc.NewClient("unix://"+p.cfg.KubeletSocket, opts...)
	if err != nil {
		return fmt.Errorf("%w: connecting to %s: %w", ErrRegistration, p.cfg.KubeletSocket, err)
	}
	defer func() { _ = conn.Close() }()
	// Wait until the kubelet listens: it removes stale plugin sockets before it does, so only
	// then is it safe to make sure our own socket exists and to name it in Register.
	if err := waitReady(ctx, conn); err != nil {
		return fmt.Errorf("%w: waiting for %s: %w", ErrRegistration, p.cfg.KubeletSocket, err)
	}
	return p.registerOnce(ctx, conn)
}

// registerOnce serves our socket again if it is gone, then sends one Register on conn.
func (p *Plugin) registerOnce(ctx context.Context, conn *grpc.ClientConn) error {
	if err := p.ensureListening(); err != nil {
		return fmt.Errorf("%w: %w", ErrRegistration, err)
	}
	req := p.registerRequest()
	// Taken before the call: if the socket is replaced meanwhile, the Register either fails or
	// reached the old one, and the new socket's kick is not mistaken for this registration's.
	target, known := identityOf(p.cfg.KubeletSocket)
	p.log.V(4).Info("Registering with the kubelet", "path", p.cfg.KubeletSocket, "endpoint", req.Endpoint)
	if _, err := pluginapi.NewRegistrationClient(conn).Register(ctx, req, grpc.WaitForReady(true)); err != nil {
		return fmt.Errorf("%w: Register on %s: %w", ErrRegistration, p.cfg.KubeletSocket, err)
	}
	p.mu.Lock()
	p.registeredTo = nil
	if known {
		p.registeredTo = &target
	}
	p.registrations++
	n := p.registrations
	p.mu.Unlock()
	p.log.V(2).Info("Registered with the kubelet", "path", p.cfg.KubeletSocket, "endpoint", req.Endpoint, "registrations", n)
	return nil
}

// registerRequest is what Register sends: our version, socket file name (relative to the
// kubelet's socket directory), resource name and options.
func (p *Plugin) registerRequest() *pluginapi.RegisterRequest {
	return &pluginapi.RegisterRequest{
		Version:      p.cfg.Version,
		Endpoint:     p.cfg.SocketName,
		ResourceName: p.cfg.ResourceName,
		Options:      proto.Clone(p.cfg.Options).(*pluginapi.DevicePluginOptions),
	}
}

// waitReady blocks until conn is connected or ctx ends.
func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	for {
		st := conn.GetState()
		switch st {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, st) {
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

package deviceplugin

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// register makes one Register call on KubeletSocket, bounded by RegisterTimeout and ctx.
// The call waits for the socket to accept connections (gRPC wait-for-ready), so a kubelet
// that is still starting is not an error until the timeout. On success it counts the
// registration and wakes waiters. Errors wrap ErrRegistration and the gRPC error.
func (p *Plugin) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RegisterTimeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+p.cfg.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("%w: connecting to %s: %w", ErrRegistration, p.cfg.KubeletSocket, err)
	}
	defer func() { _ = conn.Close() }()
	// Wait until the kubelet listens: it removes stale plugin sockets before it does, so only
	// then is it safe to make sure our own socket exists and to name it in Register.
	if err := waitReady(ctx, conn); err != nil {
		return fmt.Errorf("%w: waiting for %s: %w", ErrRegistration, p.cfg.KubeletSocket, err)
	}
	if err := p.ensureListening(); err != nil {
		return fmt.Errorf("%w: %w", ErrRegistration, err)
	}
	req := p.registerRequest()
	p.log.V(4).Info("Registering with the kubelet", "path", p.cfg.KubeletSocket, "endpoint", req.Endpoint)
	if _, err := pluginapi.NewRegistrationClient(conn).Register(ctx, req, grpc.WaitForReady(true)); err != nil {
		return fmt.Errorf("%w: Register on %s: %w", ErrRegistration, p.cfg.KubeletSocket, err)
	}
	p.mu.Lock()
	p.registrations++
	n := p.registrations
	p.notifyLocked()
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

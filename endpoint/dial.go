package endpoint

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// dial opens a gRPC client connection to the unix socket at socketPath and waits until it is
// Ready, within cfg.DialTimeout and ctx. It is the non-deprecated equivalent of the kubelet's
// grpc.DialContext(..., WithBlock()): insecure credentials, authority "localhost", a unix
// socket dialer, and transient connect failures retried with gRPC's backoff until the
// deadline. On failure the connection is closed and the error names the socket, wraps the
// context error, and carries the last connect error seen, if any.
func dial(ctx context.Context, socketPath string, cfg Config) (*grpc.ClientConn, error) {
	var (
		mu      sync.Mutex
		lastErr error
	)
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		// The target below is only a label: dialing the captured path keeps socket paths with
		// characters that are special in URLs working, as they do with the kubelet.
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", socketPath)
		mu.Lock()
		lastErr = err
		mu.Unlock()
		return c, err
	}
	conn, err := grpc.NewClient("passthrough:///"+url.PathEscape(socketPath),
		grpc.WithAuthority("localhost"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dialer),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxRecvMsgSize)),
	)
	if err != nil {
		return nil, err
	}

	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	for {
		state := conn.GetState()
		switch state {
		case connectivity.Ready:
			return conn, nil
		case connectivity.Idle:
			// Idle before the first attempt, and again if pick_first gives up between
			// attempts: ask for a (new) connection.
			conn.Connect()
		case connectivity.Shutdown:
			return nil, fmt.Errorf("connection to %q shut down while connecting", socketPath)
		}
		if !conn.WaitForStateChange(dctx, state) {
			_ = conn.Close()
			mu.Lock()
			last := lastErr
			mu.Unlock()
			if last != nil {
				return nil, fmt.Errorf("socket %q not ready: %w (last connect error: %v)", socketPath, dctx.Err(), last)
			}
			return nil, fmt.Errorf("socket %q not ready: %w", socketPath, dctx.Err())
		}
	}
}

package endpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
)

// ErrSocketMissing is the errors.Is target of a dial refused because nothing exists at the
// plugin's socket path: it was never created, or a manager's start-up cleanup deleted it.
var ErrSocketMissing = errors.New("device plugin socket does not exist")

// socketStatInterval is how often a dial in progress checks that the socket file still
// exists, so that one deleted between two connect attempts fails within this time rather
// than at gRPC's next attempt (up to seconds later) or at the deadline.
const socketStatInterval = 100 * time.Millisecond

// socketMissingError is the concrete error behind ErrSocketMissing. It unwraps to the stat or
// connect error that showed the file missing, so errors.Is(err, fs.ErrNotExist) holds too.
type socketMissingError struct {
	path string
	err  error
}

func (e *socketMissingError) Error() string {
	return fmt.Sprintf("socket %q does not exist", e.path)
}

// Is makes errors.Is(err, ErrSocketMissing) true.
func (e *socketMissingError) Is(target error) bool { return target == ErrSocketMissing }

func (e *socketMissingError) Unwrap() error { return e.err }

// dial opens a gRPC client connection to the unix socket at socketPath and waits until it is
// Ready, within cfg.DialTimeout and ctx. It is the non-deprecated equivalent of the kubelet's
// grpc.DialContext(..., WithBlock()): insecure credentials, authority "localhost", a unix
// socket dialer, and transient connect failures (a socket that refuses connections) retried
// with gRPC's backoff until the deadline.
//
// Unlike the kubelet, a path where no file exists fails at once, before the first connect
// and whenever a connect attempt finds the file gone (ENOENT), instead of being retried until
// the deadline: nobody can be serving it, and a plugin whose Register named it learns so
// while it can still serve its socket again and retry. That error wraps ErrSocketMissing and
// fs.ErrNotExist and names the path.
//
// Otherwise the error is ctx's or the deadline's error alone, as the kubelet returns it, so
// that Dial's text is the kubelet's ("... context deadline exceeded"); the socket path and the
// last connect error go to a log line instead. On failure the connection is closed, and the
// helper goroutine that watches the file has ended.
func dial(ctx context.Context, log klog.Logger, socketPath string, cfg Config) (*grpc.ClientConn, error) {
	if _, err := os.Stat(socketPath); errors.Is(err, fs.ErrNotExist) {
		return nil, &socketMissingError{path: socketPath, err: err}
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	// gone ends the wait at once, with the cause, when the file is found missing: by a
	// connect attempt (ENOENT) or by the periodic stat below.
	gctx, gone := context.WithCancelCause(dctx)
	var watcher sync.WaitGroup
	defer watcher.Wait()
	defer gone(nil)
	watcher.Add(1)
	go func() {
		defer watcher.Done()
		watchSocketFile(gctx, socketPath, gone)
	}()
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
		if err != nil && errors.Is(err, fs.ErrNotExist) {
			gone(&socketMissingError{path: socketPath, err: err})
		}
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
		if conn.WaitForStateChange(gctx, state) {
			continue
		}
		cause := context.Cause(gctx)
		if errors.Is(cause, ErrSocketMissing) && dctx.Err() == nil && conn.GetState() == connectivity.Ready {
			return conn, nil // connected just before the file went: the plugin is there
		}
		_ = conn.Close()
		if errors.Is(cause, ErrSocketMissing) {
			return nil, cause
		}
		mu.Lock()
		last := lastErr
		mu.Unlock()
		// The logger carries the socket path ("endpoint"); the returned error does not.
		log.Info("Device plugin socket did not accept a connection",
			"dialTimeout", cfg.DialTimeout, "err", dctx.Err(), "lastConnectError", last)
		return nil, dctx.Err()
	}
}

// watchSocketFile stats socketPath every socketStatInterval until ctx ends, and calls gone
// with a socketMissingError as soon as nothing exists there.
func watchSocketFile(ctx context.Context, socketPath string, gone context.CancelCauseFunc) {
	t := time.NewTicker(socketStatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := os.Stat(socketPath); errors.Is(err, fs.ErrNotExist) {
			gone(&socketMissingError{path: socketPath, err: err})
			return
		}
	}
}

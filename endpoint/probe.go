package endpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"
)

// http2Hello is what a gRPC client sends first on a new connection: the HTTP/2 client
// preface and an empty SETTINGS frame. Every HTTP/2 server answers it with a SETTINGS frame
// of its own.
var http2Hello = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00")

// probeRetry is the wait between two connect attempts of Probe when the socket refuses the
// connection or closes it unanswered.
const probeRetry = 100 * time.Millisecond

// Probe waits until the device plugin at socketPath answers the first step of a gRPC dial:
// it connects, sends the HTTP/2 client preface and an empty SETTINGS frame, waits for the
// first byte of the server's answer, and closes the connection. It returns nil once the
// plugin answered. A connection refused or closed unanswered is tried again until the
// deadline, as gRPC does when dialling.
//
// Otherwise it fails, within cfg.DialTimeout and ctx, exactly as Dial would for a socket that
// never answers: with "failed to dial device plugin: " and ErrSocketMissing (the path has no
// file, at once or as soon as the file goes), ctx's error, or the deadline's. Probe is cheap:
// one file descriptor and no goroutine but the caller's, so a caller can afford one per
// request where it could not afford a gRPC connection; the registration server probes before
// it dials (devicemanager). It is safe for concurrent use.
func Probe(ctx context.Context, socketPath string, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.WithDefaults()
	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	var lastErr error
	for {
		answered, err := probeOnce(dctx, socketPath)
		switch {
		case answered:
			return nil
		case errors.Is(err, ErrSocketMissing):
			return fmt.Errorf("failed to dial device plugin: %w", err)
		case err != nil:
			lastErr = err
		}
		select {
		case <-dctx.Done():
		case <-time.After(probeRetry):
			continue
		}
		cfg.Logger.WithValues("endpoint", socketPath).Info("Device plugin socket did not accept a connection",
			"dialTimeout", cfg.DialTimeout, "err", dctx.Err(), "lastConnectError", lastErr)
		return fmt.Errorf("failed to dial device plugin: %w", dctx.Err())
	}
}

// probeOnce makes one connection to socketPath and reports whether the server answered the
// HTTP/2 hello before ctx ended. The error says why not: a socketMissingError when the path
// has no file, the connect or read error otherwise (nil when ctx ended first).
func probeOnce(ctx context.Context, socketPath string) (answered bool, err error) {
	if _, err := os.Stat(socketPath); errors.Is(err, fs.ErrNotExist) {
		return false, &socketMissingError{path: socketPath, err: err}
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", socketPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, &socketMissingError{path: socketPath, err: err}
		}
		return false, err
	}
	defer func() { _ = conn.Close() }()
	deadline, _ := ctx.Deadline()
	if err := conn.SetWriteDeadline(deadline); err != nil {
		return false, err
	}
	if _, err := conn.Write(http2Hello); err != nil {
		return false, err
	}
	// Wait in slices of socketStatInterval, so that a file deleted meanwhile, or ctx ending,
	// ends the wait soon.
	var b [1]byte
	for ctx.Err() == nil {
		next := time.Now().Add(socketStatInterval)
		if deadline.Before(next) {
			next = deadline
		}
		if err := conn.SetReadDeadline(next); err != nil {
			return false, err
		}
		n, err := conn.Read(b[:])
		if n > 0 {
			return true, nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return false, err // closed unanswered, or reset
		}
		if _, err := os.Stat(socketPath); errors.Is(err, fs.ErrNotExist) {
			return false, &socketMissingError{path: socketPath, err: err}
		}
	}
	return false, nil
}

package endpoint

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kdm-project/kdm/internal/silentsock"
)

// TestProbe: Probe returns nil for a serving plugin, and otherwise fails exactly as Dial does
// on the same socket: at once for a path with no file, after the dial timeout for a socket
// that accepts and never answers, and as soon as that socket's file is deleted.
func TestProbe(t *testing.T) {
	ctx := context.Background()
	cfg := Config{DialTimeout: 300 * time.Millisecond}
	if err := Probe(ctx, serve(t, newStubPlugin()), cfg); err != nil {
		t.Fatalf("Probe of a serving plugin: %v", err)
	}

	dir := socketDir(t)
	same := func(what, path string) error {
		t.Helper()
		_, dialErr := Dial(ctx, "example.com/dev", path, cfg)
		probeErr := Probe(ctx, path, cfg)
		if dialErr == nil || probeErr == nil || probeErr.Error() != dialErr.Error() {
			t.Fatalf("%s: Probe error %v, want Dial's %v", what, probeErr, dialErr)
		}
		return probeErr
	}
	if err := same("missing socket", filepath.Join(dir, "missing.sock")); !errors.Is(err, ErrSocketMissing) {
		t.Errorf("missing socket: %v does not match ErrSocketMissing", err)
	}
	silent := filepath.Join(dir, "silent.sock")
	s := silentsock.Listen(t, silent)
	if err := same("silent socket", silent); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("silent socket: %v does not match context.DeadlineExceeded", err)
	}
	if s.Accepted() == 0 {
		t.Error("the silent socket never saw the probe's connection")
	}

	// A socket that closes each connection unanswered is tried again until the deadline.
	closing := filepath.Join(dir, "closing.sock")
	lis, err := net.Listen("unix", closing)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan int, 1)
	go func() {
		n := 0
		defer func() { accepted <- n }()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			n++
			_ = c.Close()
		}
	}()
	if err := Probe(ctx, closing, cfg); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("socket closing unanswered: %v, want the deadline", err)
	}
	_ = lis.Close()
	if n := <-accepted; n < 2 {
		t.Errorf("socket closing unanswered was connected %d times, want retries", n)
	}

	// Deleting the silent socket's file ends a long wait at once.
	long := Config{DialTimeout: time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- Probe(ctx, silent, long) }()
	for s.Accepted() < 3 { // Dial's, the first Probe's, this one's
		time.Sleep(time.Millisecond)
	}
	if err := os.Remove(silent); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrSocketMissing) { // not the minute's deadline
		t.Errorf("socket deleted while probed: %v, want ErrSocketMissing", err)
	}
}

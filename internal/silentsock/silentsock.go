// Package silentsock gives tests a registrant that never answers: a unix socket that accepts
// connections and then neither reads from nor writes to them, so that a gRPC dial to it waits
// for its timeout (no HTTP/2 preface ever comes). The registration-flood tests of the
// manager and of the end-to-end suite flood kubelet.sock with such sockets.
package silentsock

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Socket is a listening silent socket.
type Socket struct {
	accepted atomic.Int64
}

// Accepted returns how many connections the socket has accepted: each is a dial (or a
// probe) of the manager waiting on it.
func (s *Socket) Accepted() int64 { return s.accepted.Load() }

// Listen listens on path and accepts every connection without ever serving it. The listener
// and the accepted connections are closed, and the accepting goroutine joined, at tb's
// cleanup.
func Listen(tb testing.TB, path string) *Socket {
	tb.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		tb.Fatalf("silent socket %s: %v", path, err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		sock  Socket
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			sock.accepted.Add(1)
		}
	}()
	tb.Cleanup(func() {
		_ = lis.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return &sock
}

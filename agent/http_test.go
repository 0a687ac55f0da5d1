package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdm-project/kdm/agent/statusapi"
)

// serveHTTPForTest serves a's HTTP server within lim on a loopback listener, wrapped by wrap
// if not nil, until the test ends; it returns the address.
func serveHTTPForTest(t *testing.T, a *Agent, lim statusapi.Limits, wrap func(net.Listener) net.Listener) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if wrap != nil {
		lis = wrap(lis)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts := statusapi.Options{Registry: a.cfg.Registry, Clock: a.clock, Logger: a.log, Limits: lim}
	go func() { done <- statusapi.Serve(ctx, lis, a, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("statusapi.Serve: %v", err)
		}
	})
	return addr
}

// dialHTTP opens a raw connection to addr, closed at cleanup, and writes req on it.
func dialHTTP(t *testing.T, addr, req string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if req != "" {
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// getHealthz fetches /healthz on a fresh connection and returns the status and body.
func getHealthz(t *testing.T, addr string) (int, string) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := http.Client{Transport: tr, Timeout: waitLimit}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitLimit bounds every wait for an event in these tests.
const waitLimit = 20 * time.Second

// TestHTTPHeaderTooLarge: a request whose query string makes its header larger than
// statusapi.HTTPMaxHeaderBytes gets 431, and the server goes on serving.
func TestHTTPHeaderTooLarge(t *testing.T) {
	f := newFixture(t)
	a, _ := f.run()
	addr := serveHTTPForTest(t, a, statusapi.DefaultLimits, nil)
	for range 3 {
		c := dialHTTP(t, addr, "")
		go func() { // the server may answer, and stop reading, before the whole header is sent
			_, _ = fmt.Fprintf(c, "GET /healthz?q=%s HTTP/1.1\r\nHost: kdm\r\n\r\n", strings.Repeat("a", 900<<10))
		}()
		_ = c.SetReadDeadline(time.Now().Add(waitLimit))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("reading the answer to a 900 KiB request header: %v", err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("a 900 KiB request header got %s, want 431", resp.Status)
		}
		_ = c.Close()
	}
	if code, body := getHealthz(t, addr); code != http.StatusOK || body != "ok" {
		t.Fatalf("/healthz after oversized headers: %d %q, want 200 ok", code, body)
	}
}

// countingListener counts the connections accepted from the listener it wraps and open now,
// and the most open at once.
type countingListener struct {
	net.Listener
	mu             sync.Mutex
	accepted, open int
	peak           int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.accepted++
	l.open++
	l.peak = max(l.peak, l.open)
	return &countedConn{Conn: c, l: l}, nil
}

func (l *countingListener) counts() (accepted, open, peak int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.accepted, l.open, l.peak
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// until polls cond every few milliseconds for at most waitLimit and fails the test with what
// if it never holds.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHTTPConnectionBound: clients that open more connections than the bound on pending ones
// and send half a header each cost at most that bound (the oldest are closed, and a pending
// connection costs one goroutine), and a health probe is answered while they hold. Connections
// other than probes are served up to MaxConnections; past it a request gets 503 with
// Retry-After, and once one ends the next is served. (Before, probes waited unaccepted behind
// MaxConnections half-sent headers until those timed out.)
func TestHTTPConnectionBound(t *testing.T) {
	const bound, pendingBound, holders = 8, 16, 40
	f := newFixture(t)
	a, _ := f.run()
	lim := statusapi.DefaultLimits
	lim.MaxConnections, lim.MaxPendingConnections = bound, pendingBound
	lim.ReadHeaderTimeout, lim.ReadTimeout = time.Minute, time.Minute
	var counter *countingListener
	addr := serveHTTPForTest(t, a, lim, func(l net.Listener) net.Listener {
		counter = &countingListener{Listener: l}
		return counter
	})
	// The agent's own checks (podresources among them) may still be starting: wait for them
	// to pass before counting connections.
	until(t, "/healthz to pass", func() bool { code, _ := getHealthz(t, addr); return code == http.StatusOK })
	until(t, "the first requests' connections to end", func() bool { _, open, _ := counter.counts(); return open == 0 })
	before, _, _ := counter.counts()
	baseline := runtime.NumGoroutine()

	for range holders {
		dialHTTP(t, addr, "GET /healthz HTTP/1.1\r\nHost: kdm\r\n")
	}
	until(t, "every holder accepted and the oldest closed", func() bool {
		accepted, open, _ := counter.counts()
		return accepted == before+holders && open <= pendingBound
	})
	if code, body := getHealthz(t, addr); code != http.StatusOK || body != "ok" {
		t.Fatalf("/healthz while %d connections hold half a header: %d %q, want 200 ok", holders, code, body)
	}
	if grown := runtime.NumGoroutine() - baseline; grown > pendingBound+8 {
		t.Errorf("goroutines grew by %d for %d half-sent headers; want at most the pending bound (%d) and a few", grown, holders, pendingBound)
	}

	status := func(c net.Conn, r *bufio.Reader) *http.Response {
		t.Helper()
		if _, err := io.WriteString(c, "GET /status HTTP/1.1\r\nHost: kdm\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(waitLimit))
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("reading /status: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}
	var kept []net.Conn
	for i := range bound { // kept alive after their answer
		c := dialHTTP(t, addr, "")
		if resp := status(c, bufio.NewReader(c)); resp.StatusCode != http.StatusOK {
			t.Fatalf("/status on connection %d of %d: %s", i+1, bound, resp.Status)
		}
		kept = append(kept, c)
	}
	extra := dialHTTP(t, addr, "")
	if resp := status(extra, bufio.NewReader(extra)); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("/status past %d served connections: %s (Retry-After %q), want 503 with Retry-After", bound, resp.Status, resp.Header.Get("Retry-After"))
	}
	if code, _ := getHealthz(t, addr); code != http.StatusOK {
		t.Fatalf("/healthz while %d connections are served: %d", bound, code)
	}
	_ = kept[0].Close()
	until(t, "a /status served once a served connection ended", func() bool {
		c := dialHTTP(t, addr, "")
		defer func() { _ = c.Close() }()
		return status(c, bufio.NewReader(c)).StatusCode == http.StatusOK
	})
}

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

// TestHTTPConnectionBound: clients that open more connections than the bound and send half a
// header each get only the bound served; the others wait unaccepted, costing the agent no
// goroutine, and are served once connections end.
func TestHTTPConnectionBound(t *testing.T) {
	const bound, holders = 8, 40
	f := newFixture(t)
	a, _ := f.run()
	lim := statusapi.DefaultLimits
	lim.MaxConnections, lim.ReadHeaderTimeout, lim.ReadTimeout = bound, time.Minute, time.Minute
	var counter *countingListener
	addr := serveHTTPForTest(t, a, lim, func(l net.Listener) net.Listener {
		counter = &countingListener{Listener: l}
		return counter
	})
	if code, _ := getHealthz(t, addr); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	until(t, "the first request's connection to end", func() bool { _, open, _ := counter.counts(); return open == 0 })
	baseline := runtime.NumGoroutine()

	var conns []net.Conn
	for range holders {
		conns = append(conns, dialHTTP(t, addr, "GET /healthz HTTP/1.1\r\nHost: kdm\r\n"))
	}
	until(t, fmt.Sprintf("%d connections accepted", bound), func() bool { _, open, _ := counter.counts(); return open >= bound })
	probe := dialHTTP(t, addr, "GET /healthz HTTP/1.1\r\nHost: kdm\r\nConnection: close\r\n\r\n")
	answered := make(chan error, 1)
	go func() {
		_ = probe.SetReadDeadline(time.Now().Add(2 * waitLimit))
		resp, err := http.ReadResponse(bufio.NewReader(probe), nil)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %s", resp.Status)
			}
		}
		answered <- err
	}()
	// Unbounded, the server would accept the other holders and the probe at once; give it
	// the time to, as the failure it would be.
	grace := time.NewTimer(500 * time.Millisecond)
	select {
	case err := <-answered:
		accepted, _, peak := counter.counts()
		t.Fatalf("the probe was answered (%v) while %d connections held half a header: %d accepted, %d open at once; want at most %d",
			err, holders, accepted, peak, bound)
	case <-grace.C:
	}
	if accepted, open, _ := counter.counts(); accepted > bound+1 || open > bound {
		t.Fatalf("%d connections accepted, %d open; want at most %d open", accepted, open, bound)
	}
	if grown := runtime.NumGoroutine() - baseline; grown > bound+8 {
		t.Errorf("goroutines grew by %d for %d connections; want at most the bound (%d) and a few", grown, holders+1, bound)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("the probe, once the holders left: %v", err)
		}
	case <-time.After(2 * waitLimit):
		t.Fatal("the probe was never answered after the holders left")
	}
	if _, _, peak := counter.counts(); peak > bound {
		t.Errorf("%d connections were open at once; want at most %d", peak, bound)
	}
}

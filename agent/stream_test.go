package agent

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
)

// rawStream reads an /api/stream response on a raw connection and keeps its events' data
// lines as sent, so that tests can compare them byte for byte.
type rawStream struct {
	mu     sync.Mutex
	frames []string
	last   time.Time // when the last frame came
}

// openRawStream opens /api/stream on addr and reads its events until the test ends.
func openRawStream(t *testing.T, addr string) *rawStream {
	t.Helper()
	c := dialHTTP(t, addr, "GET /api/stream HTTP/1.1\r\nHost: kdm\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/stream: %s", resp.Status)
	}
	s := &rawStream{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				s.mu.Lock()
				s.frames, s.last = append(s.frames, data), time.Now()
				s.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { _ = c.Close(); <-done })
	return s
}

// lastAt returns when the last frame came.
func (s *rawStream) lastAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// matching returns the frames received so far that contain every one of subs.
func (s *rawStream) matching(subs ...string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, f := range s.frames {
		if !slices.ContainsFunc(subs, func(sub string) bool { return !strings.Contains(f, sub) }) {
			out = append(out, f)
		}
	}
	return out
}

// neverReadingStream opens /api/stream on addr with a small receive buffer, reads the
// response header (the stream is then open) and never reads again.
func neverReadingStream(t *testing.T, addr string) net.Conn {
	t.Helper()
	c := dialHTTP(t, addr, "")
	_ = c.(*net.TCPConn).SetReadBuffer(1024)
	if _, err := io.WriteString(c, "GET /api/stream HTTP/1.1\r\nHost: kdm\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/stream: %s", resp.Status)
	}
	return c
}

// getStream opens /api/stream with a plain client and closes it; it returns the status, the
// body of a refusal and its Retry-After.
func getStream(t *testing.T, addr string) (code int, body, retryAfter string) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: waitLimit}).Get("http://" + addr + "/api/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
	}
	return resp.StatusCode, body, resp.Header.Get("Retry-After")
}

// TestHTTPStreams: with the stream bound taken by two clients that never read and two that
// do, another stream is refused with 503 and a clear message; a pod is admitted meanwhile, and
// both readers get the state showing it, the same bytes, taken once for all streams, and go
// on getting heartbeats past the server's read timeout; once a stream ends, a new one is
// served.
func TestHTTPStreams(t *testing.T) {
	f := newFixture(t)
	a, _ := f.run()
	f.plugin("g0", "g1")
	f.waitFor(a, "the plugin's devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	lim := statusapi.DefaultLimits
	lim.MaxStreams, lim.ReadTimeout = 4, 200*time.Millisecond // streams outlive the read timeout
	addr := serveHTTPForTest(t, a, lim, nil)

	stalled := []net.Conn{neverReadingStream(t, addr), neverReadingStream(t, addr)}
	readers := []*rawStream{openRawStream(t, addr), openRawStream(t, addr)}
	code, body, retry := getStream(t, addr)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "too many status page streams: 4 are open") || retry == "" {
		t.Fatalf("a fifth stream: %d %q (Retry-After %q), want 503 naming the bound, with Retry-After", code, body, retry)
	}

	f.manifest("during", 1)
	f.waitFor(a, "the pod admitted while streams stall", func(st statusapi.NodeStatus) bool {
		r := phase(st, "during")
		return r != nil && r.Phase == podresult.PhaseAdmitted
	})
	admitted := []string{`"name":"during"`, `"phase":"Admitted"`}
	until(t, "both readers sent the same state showing the pod admitted", func() bool {
		first := readers[0].matching(admitted...)
		return slices.ContainsFunc(readers[1].matching(admitted...), func(f string) bool { return slices.Contains(first, f) })
	})

	mark := time.Now().Add(2 * lim.ReadTimeout)
	until(t, "heartbeats past the read timeout", func() bool {
		return readers[0].lastAt().After(mark) && readers[1].lastAt().After(mark)
	})

	_ = stalled[0].Close()
	until(t, "a new stream served once one ended", func() bool {
		code, _, _ := getStream(t, addr)
		return code == http.StatusOK
	})
}

// TestHTTPGoroutinesReturnToBaseline: clients that keep connections open but silent (after a
// request, or halfway through a header), send oversized headers, or open streams and leave,
// leave no goroutine behind once the timeouts have passed.
func TestHTTPGoroutinesReturnToBaseline(t *testing.T) {
	f := newFixture(t)
	a, _ := f.run()
	lim := statusapi.DefaultLimits
	lim.ReadHeaderTimeout, lim.IdleTimeout = 200*time.Millisecond, 200*time.Millisecond
	addr := serveHTTPForTest(t, a, lim, nil)
	// The agent's own checks (podresources among them) may still be starting.
	until(t, "/healthz to pass", func() bool { code, _ := getHealthz(t, addr); return code == http.StatusOK })
	baseline := goleak.IgnoreCurrent()

	for range 10 { // a request, then silence on a kept-alive connection
		c := dialHTTP(t, addr, "GET /healthz HTTP/1.1\r\nHost: kdm\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	for range 10 { // half a header, then silence
		dialHTTP(t, addr, "GET /healthz HTTP/1.1\r\nHost: kdm\r\n")
	}
	for range 3 {
		c := dialHTTP(t, addr, "")
		go func() { _, _ = io.WriteString(c, "GET /healthz?q="+strings.Repeat("a", 200<<10)+" HTTP/1.1\r\n\r\n") }()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		_ = c.Close()
	}
	for range 3 { // a stream read, then left
		c := dialHTTP(t, addr, "GET /api/stream HTTP/1.1\r\nHost: kdm\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
	// The silent connections are still open: the server must have let them go.
	if err := goleak.Find(baseline); err != nil {
		t.Fatalf("goroutines left after the clients went silent or left: %v", err)
	}
}

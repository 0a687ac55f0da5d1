package statusapi

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// admitListener is the server's listener: it accepts every connection at once and reads the
// start of its request (the header, up to admitSniffBytes) on a goroutine of its own, so that
// no client, however slow, keeps another's request from being read. Then it hands the
// connection to the http.Server by the request's path:
//
//   - a health probe (/healthz, /livez, /readyz and their checks) at once, whatever the load:
//     its answer is small and its connection closes after it (probeClose);
//   - anything else while fewer than Limits.MaxConnections such connections are served;
//     past that the client gets 503 Service Unavailable with Retry-After and is closed;
//   - a header longer than admitSniffBytes as anything else (the server answers 431 past
//     Limits.MaxHeaderBytes).
//
// Connections whose header is still coming are bounded by Limits.MaxPendingConnections: past
// it the oldest of the peer (IP address) holding the most is closed, so that one client's
// flood turns over among its own connections and a probe, whose header comes in one packet,
// is read before its turn comes. Each waits at most Limits.ReadHeaderTimeout. A pending
// connection costs one goroutine and a buffer that grows with what it sent, at most
// admitSniffBytes.
type admitListener struct {
	inner       net.Listener
	lim         Limits
	log         klog.Logger
	handed      chan net.Conn
	closed      chan struct{}
	closeOnce   sync.Once
	acceptErr   error // set before closed is closed by the accept loop
	acceptEnded chan struct{}
	wg          sync.WaitGroup

	mu      sync.Mutex
	pending []*pendingConn // oldest first
	served  int            // non-probe connections handed over and not closed
}

// admitSniffBytes bounds how much of a request admission reads before it decides.
const admitSniffBytes = 8 << 10

// admitRetryAfter is the wait a client refused with 503 is asked to keep.
const admitRetryAfter = "1"

type pendingConn struct {
	conn net.Conn
	peer string
}

func newAdmitListener(inner net.Listener, lim Limits, log klog.Logger) *admitListener {
	l := &admitListener{inner: inner, lim: lim, log: log, handed: make(chan net.Conn),
		closed: make(chan struct{}), acceptEnded: make(chan struct{})}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

// Accept returns the next connection admission hands over, or an error once the listener is
// closed or failed.
func (l *admitListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.handed:
		return c, nil
	case <-l.acceptEnded:
		if l.acceptErr != nil {
			return nil, l.acceptErr
		}
		return nil, net.ErrClosed
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes every connection still pending. It does not wait for the
// goroutines; wait does.
func (l *admitListener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.closed)
		err = l.inner.Close()
		l.mu.Lock()
		for _, p := range l.pending {
			_ = p.conn.Close()
		}
		l.pending = nil
		l.mu.Unlock()
	})
	return err
}

// Addr is the inner listener's address.
func (l *admitListener) Addr() net.Addr { return l.inner.Addr() }

// wait returns once the accept loop and every admission goroutine have ended (after Close).
func (l *admitListener) wait() { l.wg.Wait() }

func (l *admitListener) acceptLoop() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		c, err := l.inner.Accept()
		if err != nil {
			select {
			case <-l.closed:
				close(l.acceptEnded)
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of file descriptors or the like: wait as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				l.log.Info("HTTP accept failed; retrying", "err", err, "delay", backoff)
				select {
				case <-time.After(backoff):
					continue
				case <-l.closed:
					close(l.acceptEnded)
					return
				}
			}
			l.acceptErr = err
			close(l.acceptEnded)
			return
		}
		backoff = 0
		l.admit(c)
	}
}

// admit records c as pending, closing the oldest pending connection of the busiest peer if
// that makes too many, and starts reading c's header.
func (l *admitListener) admit(c net.Conn) {
	p := &pendingConn{conn: c, peer: peerHost(c)}
	l.mu.Lock()
	select {
	case <-l.closed:
		l.mu.Unlock()
		_ = c.Close()
		return
	default:
	}
	l.pending = append(l.pending, p)
	var victim *pendingConn
	if len(l.pending) > l.lim.MaxPendingConnections {
		victim = busiestOldest(l.pending)
		l.pending = slices.DeleteFunc(l.pending, func(o *pendingConn) bool { return o == victim })
	}
	l.wg.Add(1)
	l.mu.Unlock()
	if victim != nil {
		_ = victim.conn.Close()
	}
	go l.sniff(p)
}

// busiestOldest returns the oldest pending connection of the peer holding the most; the
// newest, last, is never picked. pending holds at least two.
func busiestOldest(pending []*pendingConn) *pendingConn {
	perPeer := map[string]int{}
	for _, p := range pending {
		perPeer[p.peer]++
	}
	var victim *pendingConn
	for _, p := range pending[:len(pending)-1] {
		if victim == nil || perPeer[p.peer] > perPeer[victim.peer] {
			victim = p
		}
	}
	return victim
}

// release takes p off the pending list; it reports false if it was no longer there (closed
// to make room, or at Close).
func (l *admitListener) release(p *pendingConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.pending)
	l.pending = slices.DeleteFunc(l.pending, func(o *pendingConn) bool { return o == p })
	return len(l.pending) < n
}

// sniff reads p's request header and hands the connection on by its path (see admitListener).
func (l *admitListener) sniff(p *pendingConn) {
	defer l.wg.Done()
	c := p.conn
	_ = c.SetReadDeadline(time.Now().Add(l.lim.ReadHeaderTimeout))
	buf := make([]byte, 0, 1024)
	complete := false
	for len(buf) < admitSniffBytes {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(cap(buf), admitSniffBytes-len(buf)))
		}
		n, err := c.Read(buf[len(buf):min(cap(buf), admitSniffBytes)])
		buf = buf[:len(buf)+n]
		if bytes.Contains(buf, []byte("\r\n\r\n")) || bytes.Contains(buf, []byte("\n\n")) {
			complete = true
			break
		}
		if err != nil {
			if l.release(p) {
				_ = c.Close()
			}
			return
		}
	}
	if !l.release(p) {
		return // closed meanwhile
	}
	_ = c.SetReadDeadline(time.Time{})
	pc := &prefixConn{Conn: c, prefix: buf}
	if complete && isProbeRequest(buf) {
		l.hand(pc)
		return
	}
	l.mu.Lock()
	full := l.served >= l.lim.MaxConnections
	if !full {
		l.served++
	}
	l.mu.Unlock()
	if full {
		refuseBusy(c)
		return
	}
	l.hand(&servedConn{prefixConn: pc, l: l})
}

// hand gives c to Accept, or closes it if the listener closes first.
func (l *admitListener) hand(c net.Conn) {
	select {
	case l.handed <- c:
	case <-l.closed:
		_ = c.Close()
	}
}

// refuseBusy answers 503 on c, with a short write deadline, and closes it.
func refuseBusy(c net.Conn) {
	const body = "kdm: too many HTTP connections; retry later\n"
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"Retry-After: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", admitRetryAfter, len(body), body)
	_ = c.Close()
}

// probePaths are the health endpoints, served whatever the load.
var probePaths = []string{"/healthz", "/livez", "/readyz"}

// isProbePath reports whether path is a health endpoint or one of its checks.
func isProbePath(path string) bool {
	for _, p := range probePaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// isProbeRequest reports whether the request line at the start of header asks for a health
// endpoint with GET or HEAD.
func isProbeRequest(header []byte) bool {
	line, _, _ := bytes.Cut(header, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) != 3 || f[0] != "GET" && f[0] != "HEAD" {
		return false
	}
	path, _, _ := strings.Cut(f[1], "?")
	return isProbePath(path)
}

// peerHost is the IP address of c's peer ("" if unknown).
func peerHost(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return ""
}

// prefixConn reads prefix, what admission read, before the rest of the connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// servedConn counts against Limits.MaxConnections until it is closed.
type servedConn struct {
	*prefixConn
	l    *admitListener
	once sync.Once
}

func (c *servedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.served--
		c.l.mu.Unlock()
	})
	return c.prefixConn.Close()
}

package kubecluster

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// HeartbeatEvery is how often a build in progress says that it is still going.
const HeartbeatEvery = 30 * time.Second

// buildProgress sits between `go build -v` and the build log: it counts the package paths
// that -v prints (one per compiled package) instead of copying thousands of them, passes every
// other line through (downloads, compiler errors), and, from start until stop, writes a
// heartbeat with the elapsed time, the packages compiled so far and the last one. Safe for
// concurrent use: go build writes while the heartbeat reads.
type buildProgress struct {
	out   io.Writer
	start time.Time

	mu       sync.Mutex
	partial  []byte // an incomplete last line
	packages int
	last     string
	total    int // packages the build depends on (an upper bound), 0 when unknown

	stopOnce sync.Once
	stopc    chan struct{}
	done     chan struct{}
}

// startProgress writes to out and sends a heartbeat every interval until stop.
func startProgress(out io.Writer, interval time.Duration) *buildProgress {
	p := &buildProgress{out: out, start: time.Now(), stopc: make(chan struct{}), done: make(chan struct{})}
	go p.beat(interval)
	return p
}

func (p *buildProgress) beat(interval time.Duration) {
	defer close(p.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.stopc:
			return
		case <-t.C:
			p.mu.Lock()
			n, last, total := p.packages, p.last, p.total
			p.mu.Unlock()
			of := ""
			if total > 0 {
				of = fmt.Sprintf(" of at most %d", total)
			}
			msg := fmt.Sprintf("kubecluster: still building, %s elapsed, %d%s packages compiled", time.Since(p.start).Round(time.Second), n, of)
			if last != "" {
				msg += ", last " + last
			}
			p.println(msg)
		}
	}
}

// setTotal sets the number of packages the build depends on, which the heartbeat names as
// the most it can compile (a warm cache compiles fewer).
func (p *buildProgress) setTotal(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total = n
}

// stop ends the heartbeat, waits for it, and writes out any incomplete last line. It returns
// the number of packages compiled.
func (p *buildProgress) stop() int {
	p.stopOnce.Do(func() { close(p.stopc) })
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.partial) > 0 {
		p.line(string(p.partial))
		p.partial = nil
	}
	return p.packages
}

// Write takes go build's output.
func (p *buildProgress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		p.line(string(p.partial[:i]))
		p.partial = p.partial[i+1:]
	}
	return len(b), nil
}

// line handles one complete line; p.mu is held.
func (p *buildProgress) line(l string) {
	if isPackagePath(l) {
		p.packages++
		p.last = l
		return
	}
	_, _ = io.WriteString(p.out, l+"\n")
}

// println writes one line of its own, holding p.mu so it never splits go build's output.
func (p *buildProgress) println(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(p.out, s+"\n")
}

// isPackagePath reports whether a line of `go build -v` output is a package path (what -v
// prints for each package it compiles) rather than a message: no spaces, no colons.
func isPackagePath(l string) bool {
	return l != "" && !strings.ContainsAny(l, " \t:")
}

package statusapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Stream pacing: a state is sent at every change, at most every streamMinGap, and at least
// every streamTick (the page's heartbeat and the countdowns' resync).
const (
	streamMinGap = 100 * time.Millisecond
	streamTick   = time.Second
	// streamRetryAfter is the Retry-After of a stream refused past the bound.
	streamRetryAfter = "5"
)

// stateStreams serves /api/stream: the status page's state as server-sent events. One
// goroutine (run) takes the Source's PageState and encodes it once per change, while any
// stream is open, and leaves the frame in every stream's mailbox, which holds only the latest:
// a stream that falls behind skips to the newest state instead of queueing them. Each stream's
// handler writes what its mailbox holds under a write deadline, so a client that reads slowly
// or never blocks only its own handler until the deadline drops it; it never holds up the
// state's computation, the other streams or the Source (the state is taken by run alone, and
// run never waits for a stream). At most maxStreams streams are served at once; more are
// answered 503.
type stateStreams struct {
	src          Source
	clock        clock.Clock
	log          klog.Logger
	maxStreams   int
	writeTimeout time.Duration

	kick    chan struct{} // capacity 1: a stream opened and waits for its first state
	stopped chan struct{} // closed when run returns; the streams end

	mu   sync.Mutex
	subs map[*streamMailbox]struct{}
}

// streamMailbox is one open stream's mailbox: capacity 1, only run sends, and it replaces an
// unread frame with the newer one.
type streamMailbox struct {
	mailbox chan []byte
}

func newStateStreams(src Source, clk clock.Clock, log klog.Logger, maxStreams int, writeTimeout time.Duration) *stateStreams {
	return &stateStreams{src: src, clock: clk, log: log, maxStreams: maxStreams, writeTimeout: writeTimeout, kick: make(chan struct{}, 1),
		stopped: make(chan struct{}), subs: map[*streamMailbox]struct{}{}}
}

// errStreamsStopped refuses a stream once the server is stopping.
var errStreamsStopped = errors.New("the agent is stopping")

// subscribe opens a stream, or returns an error (for a 503) past the bound or once run ended.
func (s *stateStreams) subscribe() (*streamMailbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.stopped:
		return nil, errStreamsStopped
	default:
	}
	if len(s.subs) >= s.maxStreams {
		return nil, fmt.Errorf("too many status page streams: %d are open, the most kdm serves at once; "+
			"close another page or retry later", len(s.subs))
	}
	sub := &streamMailbox{mailbox: make(chan []byte, 1)}
	s.subs[sub] = struct{}{}
	select {
	case s.kick <- struct{}{}:
	default: // a kick is pending already
	}
	return sub, nil
}

func (s *stateStreams) unsubscribe(sub *streamMailbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subs, sub)
}

func (s *stateStreams) open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

// run computes and hands out the state while streams are open, until ctx ends; then the
// streams end.
func (s *stateStreams) run(ctx context.Context) {
	defer close(s.stopped)
	clk := s.clock
	for {
		if s.open() == 0 {
			select { // idle until a stream opens
			case <-ctx.Done():
				return
			case <-s.kick:
			}
		}
		changed := s.src.PageChanges()
		s.publish()
		tick := clk.NewTimer(streamTick)
		select {
		case <-ctx.Done():
			tick.Stop()
			return
		case <-changed:
		case <-s.kick:
		case <-tick.C():
		}
		tick.Stop()
		gap := clk.NewTimer(streamMinGap)
		select { // coalesce a burst of changes
		case <-ctx.Done():
			gap.Stop()
			return
		case <-gap.C():
		}
	}
}

// publish takes the state once and leaves it in every open stream's mailbox, in place of a
// frame the stream has not taken yet.
func (s *stateStreams) publish() {
	data, err := json.Marshal(s.src.PageState())
	if err != nil {
		s.log.Error(err, "Failed to encode the status page state")
		return
	}
	frame := fmt.Appendf(nil, "event: state\ndata: %s\n\n", data)
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		select {
		case <-sub.mailbox: // the stream is behind: it gets this frame instead
		default:
		}
		sub.mailbox <- frame // cannot block: only publish sends, and the slot is empty
	}
}

// serve streams the state to one client until it goes, a write fails or runs past the write
// timeout, or the streams stop.
func (s *stateStreams) serve(w http.ResponseWriter, r *http.Request) {
	sub, err := s.subscribe()
	if err != nil {
		w.Header().Set("Retry-After", streamRetryAfter)
		w.Header().Set("Connection", "close") // give the connection's slot back at once
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer s.unsubscribe(sub)
	rc := http.NewResponseController(w)
	pageHeaders(w, "text/event-stream")
	w.WriteHeader(http.StatusOK)
	// Network deadlines: they follow the wall clock whatever the agent's clock is.
	_ = rc.SetWriteDeadline(time.Now().Add(s.writeTimeout))
	if err := rc.Flush(); err != nil {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.stopped:
			return
		case frame := <-sub.mailbox:
			_ = rc.SetWriteDeadline(time.Now().Add(s.writeTimeout))
			if _, err := w.Write(frame); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}

package conformance

import (
	"context"
	"fmt"
	"sync"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/endpoint"
)

func (r *runner) checkStreamClose() (Status, []string) {
	first, bad := r.fresh()
	if bad != nil {
		return bad.status, bad.evidence
	}
	var curs []regView
	for _, res := range r.resources {
		if cur, ok := r.current(res); ok {
			curs = append(curs, cur)
		}
	}
	from := len(r.reg.snapshot())
	closed := time.Now()
	wctx, stopWatch := context.WithCancel(r.ctx)
	var watches []*serveWatch
	for _, cur := range curs {
		r.reg.closeStream(cur.index)
		watches = append(watches, r.watchServing(wctx, cur.req.ResourceName, cur.socket))
	}
	defer func() {
		stopWatch()
		for _, w := range watches {
			<-w.done
		}
	}()
	select {
	case <-r.proc.exited():
		return Fail, []string{fmt.Sprintf("the plugin exited %s after the manager closed its stream (%s)",
			sinceStr(closed, time.Now()), r.proc.exitStatus()), first}
	case <-time.After(r.t.StreamCloseWindow):
	case <-r.ctx.Done():
		return Skip, []string{"run cancelled"}
	}
	end := time.Now()
	st := Pass
	var ev []string
	for i, cur := range curs {
		s, msg := r.afterStreamClose(cur, watches[i], from, closed, end)
		st = worse(st, s)
		ev = append(ev, r.label(cur.req.ResourceName)+msg)
	}
	if st == Fail {
		return st, append(ev, first)
	}
	s, msg := r.restartAfterClose()
	return worse(st, s), append(append(ev, msg...), first)
}

// keepsRunning waits until Settle after last for the plugin instance to exit (a plugin
// process of its tree that dies is caught by the watchdog and fails the check anyway); it
// reports false, with the evidence, when it exited, timed from ref (what names it).
func (r *runner) keepsRunning(last, ref time.Time, what string) (string, bool) {
	t := time.NewTimer(time.Until(last.Add(r.t.Settle)))
	defer t.Stop()
	select {
	case <-r.proc.exited():
		return fmt.Sprintf("the plugin exited %s after %s (%s)", sinceStr(ref, time.Now()), what, r.proc.exitStatus()), false
	case <-t.C:
	case <-r.ctx.Done():
	}
	return "", true
}

// restartAfterClose is the rest of what the kubelet does when it closes every stream, at its
// own restart: kubelet.sock is created again. The plugin must register every resource again
// and keep running for Settle after the last list (a plugin whose scanner still sends to the
// closed stream's channel crashes here).
func (r *runner) restartAfterClose() (Status, []string) {
	r.reg.stop()
	from := len(r.reg.snapshot())
	if err := r.reg.start(); err != nil {
		return Error, []string{"suite step \"restart the manager probe\" failed: " + err.Error()}
	}
	restarted := time.Now()
	got, missing := r.waitAllAccepted(from, r.t.RegisterWarn)
	if len(missing) > 0 {
		msg := fmt.Sprintf("after the manager was restarted following the close, %s did not register again within %v", quoteList(missing), r.t.RegisterWarn)
		if !r.proc.alive() {
			msg += "; the plugin exited: " + r.proc.exitStatus()
		}
		return Fail, []string{msg}
	}
	last := restarted
	for _, v := range got {
		if lv, ok := r.waitLists(v.index, 1, r.t.FirstList); ok && lv.lists[0].at.After(last) {
			last = lv.lists[0].at
		}
	}
	if msg, ok := r.keepsRunning(last, restarted, "the manager was restarted following the close"); !ok {
		return Fail, []string{msg}
	}
	return Pass, []string{fmt.Sprintf("after the manager was restarted following the close, it registered again within %s and kept running %v after its list",
		sinceStr(restarted, last), r.t.Settle)}
}

// serveWatch is a connection of the suite's own to a plugin socket whose stream the manager
// closed: it dials (again every 100 ms until it connects) and keeps a ListAndWatch stream open
// until its context ends, recording the first list and, if the plugin ends the stream, when.
type serveWatch struct {
	done chan struct{}

	mu    sync.Mutex
	state watchState
}

// watchState is what a serveWatch saw so far.
type watchState struct {
	connected time.Time
	firstList time.Time
	devices   int
	ended     time.Time
	err       error
}

func (w *serveWatch) update(f func(*watchState)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(&w.state)
}

func (w *serveWatch) view() watchState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// watchServing starts watching socket; the watch ends with ctx.
func (r *runner) watchServing(ctx context.Context, resource, socket string) *serveWatch {
	w := &serveWatch{done: make(chan struct{})}
	cfg := endpoint.Config{DialTimeout: r.t.FirstList, OptionsTimeout: r.t.FirstList, Logger: r.cfg.Logger}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			dctx, cancel := context.WithTimeout(ctx, r.t.FirstList)
			ep, err := endpoint.Dial(dctx, resource, socket, cfg)
			cancel()
			if err != nil {
				w.update(func(s *watchState) { s.err = err })
				t := time.NewTimer(100 * time.Millisecond)
				select {
				case <-t.C:
				case <-ctx.Done():
				}
				t.Stop()
				continue
			}
			w.update(func(s *watchState) { s.connected, s.err = time.Now(), nil })
			err = ep.Run(ctx, func(d []*pluginapi.Device) {
				w.update(func(s *watchState) {
					if s.firstList.IsZero() {
						s.firstList, s.devices = time.Now(), len(d)
					}
				})
			})
			ep.Stop()
			if ctx.Err() == nil {
				w.update(func(s *watchState) { s.ended, s.err = time.Now(), err })
			}
			return
		}
	}()
	return w
}

// afterStreamClose judges one resource whose stream the manager closed at closed, at end (the
// close plus the window): it passes when the plugin re-registered it (at index >= from) and
// that registration still streams, or, if it did not re-register, when the suite's own
// connection to its socket got a list and still streams. A stream that ended inside the
// window is a plugin that stopped serving, whenever in the window it did.
func (r *runner) afterStreamClose(cur regView, watch *serveWatch, from int, closed, end time.Time) (Status, string) {
	window := sinceStr(closed, end)
	snap := r.reg.snapshot()
	if i := acceptedFrom(snap, from, cur.req.ResourceName); i >= 0 {
		// The latest accepted re-registration decides: a plugin may register more than once.
		last := snap[i]
		for j := i + 1; j < len(snap); j++ {
			if snap[j].accepted() && snap[j].req.ResourceName == cur.req.ResourceName {
				last = snap[j]
			}
		}
		re := fmt.Sprintf("the plugin re-registered %s after its stream was closed", sinceStr(closed, snap[i].at))
		switch {
		case !last.streamEnd.IsZero():
			return Fail, fmt.Sprintf("%s, then stopped serving: that stream ended %s after the close (%v)", re, sinceStr(closed, last.streamEnd), last.streamErr)
		case len(last.lists) == 0:
			return Fail, re + ", but sent no list on the new stream within " + window
		}
		return Pass, fmt.Sprintf("%s and still serves %s after the close", re, window)
	}
	w := watch.view()
	switch {
	case w.connected.IsZero():
		return Fail, fmt.Sprintf("the plugin is running but neither re-registered nor serves %s (watched %s): %v", cur.socket, window, w.err)
	case !w.ended.IsZero():
		return Fail, fmt.Sprintf("the plugin stopped serving %s after its stream was closed: a new connection's stream ended then (%v), and it did not re-register", sinceStr(closed, w.ended), w.err)
	case w.firstList.IsZero():
		return Fail, fmt.Sprintf("the plugin is running but sends no list on a new connection to %s (watched %s)", cur.socket, window)
	}
	return Pass, fmt.Sprintf("the plugin kept serving %s: a new connection listed %d devices and still streams %s after the close", cur.socket, w.devices, window)
}

// streamCloseCheck is check 6, run by checkStreamClose above.
var streamCloseCheck = check{6, "stream-close",
	"from a fresh plugin process: when the manager closes the ListAndWatch stream, the plugin keeps serving a new connection or re-registers, and its stream does not end, for 5s; when the manager is then restarted it registers again and keeps running",
	"the kubelet's client Disconnect closes the plugin connection when a stream ends or at Stop, and a replaced registration's stream is closed when it ends; a plugin must survive its stream being closed",
	(*runner).checkStreamClose}

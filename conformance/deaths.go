package conformance

import (
	"fmt"
	"sync"
	"time"
)

// stderrLines is how many lines of the plugin's stderr a death's evidence shows.
const stderrLines = 6

// pollInterval is how often the watchdog looks for registered processes that ended.
const pollInterval = 50 * time.Millisecond

// death is a plugin process that ended without the suite signalling or killing it.
type death struct {
	pid    int
	at     time.Time
	status string   // how it ended, as far as the suite can tell
	stderr []string // the last lines of the plugin's stderr when the end was seen
	// reported is set once a check's evidence has shown this death.
	reported bool
}

// evidence describes d for a check's evidence: what ended, when (relative to ref, "into the
// check" or "after the manager restart" as what says) and how, then its stderr lines.
func (d *death) evidence(ref time.Time, what string) []string {
	out := []string{fmt.Sprintf("the plugin process (pid %d) died %s %s: %s", d.pid, sinceStr(ref, d.at), what, d.status)}
	if len(d.stderr) == 0 {
		return append(out, "it wrote nothing to stderr")
	}
	for _, l := range d.stderr {
		out = append(out, "stderr: "+l)
	}
	return out
}

// watchdog records every plugin process that dies without the suite signalling or killing
// it: the instances the suite started (told by pluginProcess.onExit, with their exit status)
// and every process that made a Register call (found gone by polling /proc, which catches a
// plugin restarted by a loop the suite started). A process is identified by its PID and
// start time, so a reused PID is not mistaken for a live plugin. Its goroutine runs from
// start to stop; it is safe for concurrent use.
type watchdog struct {
	proc *pluginProcess
	reg  *registrar

	mu     sync.Mutex
	gone   map[procID]bool // registered processes whose end is recorded
	deaths []*death

	stopCh chan struct{}
	wg     sync.WaitGroup
}

func newWatchdog(proc *pluginProcess, reg *registrar) *watchdog {
	w := &watchdog{proc: proc, reg: reg, gone: map[procID]bool{}, stopCh: make(chan struct{})}
	proc.onExit = w.instanceExited
	return w
}

// start polls until stop.
func (w *watchdog) start() {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(pollInterval)
		defer t.Stop()
		for {
			select {
			case <-w.stopCh:
				return
			case <-t.C:
				w.poll()
			}
		}
	}()
}

// stop ends the polling goroutine and waits for it.
func (w *watchdog) stop() {
	close(w.stopCh)
	w.wg.Wait()
}

// instanceExited records the exit of an instance the suite started, unless the suite ended it.
func (w *watchdog) instanceExited(pid int, status string, expected bool) {
	if expected {
		return
	}
	d := &death{pid: pid, at: time.Now(), status: status, stderr: w.proc.stderr.lines(stderrLines)}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deaths = append(w.deaths, d)
}

// poll looks at every process that registered and records those that have ended since,
// unless the suite signalled or killed their process group.
func (w *watchdog) poll() {
	for _, id := range w.reg.callers() {
		if started, _ := w.proc.leader(id.pid); started {
			continue // instanceExited tells of it, with its exit status
		}
		w.mu.Lock()
		gone := w.gone[id]
		w.mu.Unlock()
		if gone {
			continue
		}
		if st, ok := readStat(id.pid); ok && st.state != 'Z' && st.state != 'X' && st.startTime == id.startTime {
			continue
		}
		var d *death
		if !w.proc.groupExpected(id.pgrp) {
			d = &death{pid: id.pid, at: time.Now(),
				status: "ended (a child of the plugin command: its exit status went to its parent)",
				stderr: w.proc.stderr.lines(stderrLines)}
		}
		w.mu.Lock()
		w.gone[id] = true
		if d != nil {
			w.deaths = append(w.deaths, d)
		}
		w.mu.Unlock()
	}
}

// count returns how many deaths are recorded.
func (w *watchdog) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.deaths)
}

// unreported returns the deaths recorded at index from or later that no check has shown yet,
// and marks them shown.
func (w *watchdog) unreported(from int) []death {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []death
	for _, d := range w.deaths[min(from, len(w.deaths)):] {
		if !d.reported {
			d.reported = true
			out = append(out, *d)
		}
	}
	return out
}

// since returns every death seen at or after t, shown already or not, and marks them shown.
func (w *watchdog) since(t time.Time) []death {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []death
	for _, d := range w.deaths {
		if !d.at.Before(t) {
			d.reported = true
			out = append(out, *d)
		}
	}
	return out
}

package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stderrLines is how many lines of the plugin's stderr a death's evidence shows.
const stderrLines = 6

// pollInterval is how often the watchdog walks the plugin's process tree.
const pollInterval = 25 * time.Millisecond

// death is a plugin process that ended without the suite signalling or killing it.
type death struct {
	pid, ppid  int
	exe        string // its executable's base name ("" if unknown)
	parentExe  string
	started    time.Time
	at         time.Time
	status     string   // how it ended, as far as the suite can tell
	registered bool     // whether it made a Register call
	stderr     []string // the stderr lines that arrived while it ran
	stderrRead bool     // whether stderr is filled in
	// reported is set once a check's evidence has shown this death.
	reported bool
}

// evidence describes d for a check's evidence: which process ended (PID, executable, parent),
// when (relative to ref, "into the check" or "after the manager restart" as what says), after
// how long, whether it had registered and how it ended, then its stderr lines.
func (d *death) evidence(ref time.Time, what string) []string {
	who := fmt.Sprintf("pid %d", d.pid)
	switch {
	case d.exe != "" && d.ppid != 0:
		who += fmt.Sprintf(" (%s, child of pid %d %s)", d.exe, d.ppid, d.parentExe)
	case d.exe != "":
		who += " (" + d.exe + ", started by the suite)"
	}
	reg := "after it registered"
	if !d.registered {
		reg = "before it registered"
	}
	out := []string{fmt.Sprintf("the plugin process %s died %s %s, %s after it started, %s: %s",
		who, sinceStr(ref, d.at), what, sinceStr(d.started, d.at), reg, d.status)}
	if len(d.stderr) == 0 {
		return append(out, fmt.Sprintf("pid %d wrote nothing to stderr", d.pid))
	}
	for _, l := range d.stderr {
		out = append(out, fmt.Sprintf("pid %d stderr: %s", d.pid, l))
	}
	return out
}

// tracked is a process of the plugin's tree the watchdog follows.
type tracked struct {
	id       procID
	ppid     int
	exe      string
	started  time.Time
	instance int  // PID of the instance the suite started that it descends from
	leader   bool // the instance itself: its exit comes from Wait (instanceExited)
	gone     bool
}

// watchdog follows every process of the plugin's tree and records each that dies without the
// suite signalling or killing it: the instances the suite started (told by
// pluginProcess.onExit, with their exit status) and every descendant of theirs (a restart
// loop's children, found by walking /proc/PID/task/*/children every pollInterval), whether
// or not it registered. A descendant counts as a plugin process when it made a Register call
// or ran an executable that a registering process ran (a restart loop's `sleep` does not);
// its exit status is read from /proc while it is a zombie, and otherwise went to its parent.
// Each death's stderr lines are those that arrived while it ran, up to the start of the next
// process of its instance that is not its descendant. A process is identified by PID and start
// time, so a reused PID is not mistaken for a live plugin. The goroutine runs from start to
// stop; it is safe for concurrent use.
type watchdog struct {
	proc *pluginProcess
	reg  *registrar
	boot time.Time // the machine's boot time, to turn /proc start times into times

	mu      sync.Mutex
	procs   map[int]*tracked // by PID; a reused PID replaces an ended entry
	regExes map[string]bool  // executables that made Register calls
	deaths  []*death

	stopCh chan struct{}
	wg     sync.WaitGroup
}

func newWatchdog(proc *pluginProcess, reg *registrar) *watchdog {
	w := &watchdog{proc: proc, reg: reg, boot: bootTime(), procs: map[int]*tracked{}, regExes: map[string]bool{},
		stopCh: make(chan struct{})}
	proc.onExit = w.instanceExited
	return w
}

// bootTime is now less the machine's uptime (10 ms precision), or the zero time.
func bootTime() time.Time {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return time.Time{}
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return time.Time{}
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return time.Time{}
	}
	return time.Now().Add(-time.Duration(up * float64(time.Second)))
}

// startedAt turns a /proc start time (clock ticks after boot) into a time.
func (w *watchdog) startedAt(ticks int64) time.Time {
	if w.boot.IsZero() {
		return time.Now()
	}
	return w.boot.Add(time.Duration(ticks) * time.Second / clockTicks)
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
func (w *watchdog) instanceExited(pid int, started time.Time, status string, expected bool) {
	if expected {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	d := &death{pid: pid, started: started, at: now, status: status, registered: w.registeredLocked(pid)}
	if t := w.procs[pid]; t != nil {
		d.exe = t.exe
		t.gone = true
	}
	if d.exe == "" && len(w.proc.argv) > 0 {
		d.exe = filepath.Base(w.proc.argv[0])
	}
	// Wait returned, so the pipe is drained: its lines are all there.
	w.withStderrLocked(d)
	w.deaths = append(w.deaths, d)
}

// registeredLocked reports whether pid made a Register call (it is live or just ended).
func (w *watchdog) registeredLocked(pid int) bool {
	for _, c := range w.reg.callers() {
		if c.pid == pid {
			return true
		}
	}
	return false
}

// nextStartLocked returns when the first plugin process started after started that is
// neither pid nor its descendant, or the zero time: the end of pid's stderr lines. Helpers (a
// restart loop's sleep, which starts as soon as the plugin died, before the pipe has
// delivered its last lines) do not end them.
func (w *watchdog) nextStartLocked(pid int, started time.Time) time.Time {
	var next time.Time
	for _, t := range w.procs {
		if t.id.pid == pid || !t.started.After(started) || w.descendsLocked(t, pid) {
			continue
		}
		if !t.leader && !w.regExes[t.exe] && !w.registeredLocked(t.id.pid) {
			continue
		}
		if next.IsZero() || t.started.Before(next) {
			next = t.started
		}
	}
	return next
}

// descendsLocked reports whether t descends from pid.
func (w *watchdog) descendsLocked(t *tracked, pid int) bool {
	for depth := 0; t != nil && depth < 64; depth++ {
		if t.ppid == pid {
			return true
		}
		t = w.procs[t.ppid]
	}
	return false
}

// poll adds the current instance and every Register caller to the tree, then looks at each
// live process: it records the ends and finds new children.
func (w *watchdog) poll() {
	if pid := w.proc.pid(); pid != 0 {
		w.add(pid, 0, pid, true)
	}
	callers := w.reg.callers()
	for _, c := range callers {
		w.add(c.pid, 0, 0, false)
	}
	w.mu.Lock()
	for _, c := range callers {
		if t := w.procs[c.pid]; t != nil && t.id == c && t.exe != "" {
			w.regExes[t.exe] = true
		}
	}
	var live []*tracked
	for _, t := range w.procs {
		if !t.gone {
			live = append(live, t)
		}
	}
	w.mu.Unlock()
	for _, t := range live {
		st, ok := readStat(t.id.pid)
		if ok && st.startTime == t.id.startTime && st.state != 'Z' && st.state != 'X' {
			if exe := exeName(t.id.pid); exe != "" {
				w.mu.Lock()
				t.exe = exe // it may have exec'd since it was seen
				w.mu.Unlock()
			}
			for _, child := range children(t.id.pid) {
				w.add(child, t.id.pid, t.instance, false)
			}
			continue
		}
		status := ""
		if ok && st.startTime == t.id.startTime && st.state == 'Z' && st.hasExit {
			status = waitStatusString(syscall.WaitStatus(st.exitCode))
		}
		w.ended(t, status)
	}
}

// add starts following pid (child of ppid, of instance) unless it is followed already.
func (w *watchdog) add(pid, ppid, instance int, leader bool) {
	w.mu.Lock()
	if t := w.procs[pid]; t != nil && !t.gone {
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	st, ok := readStat(pid)
	if !ok || st.state == 'Z' || st.state == 'X' {
		return
	}
	if ppid == 0 {
		ppid = st.ppid
	}
	t := &tracked{id: procID{pid: pid, pgrp: st.pgrp, startTime: st.startTime}, ppid: ppid, exe: exeName(pid),
		started: w.startedAt(st.startTime), instance: instance, leader: leader}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.procs[pid]; old != nil && !old.gone {
		return
	}
	if t.instance == 0 {
		if p := w.procs[ppid]; p != nil {
			t.instance = p.instance
		} else if started, _ := w.proc.leader(st.pgrp); started {
			t.instance = st.pgrp
		}
	}
	w.procs[pid] = t
}

// ended records that t is gone; status is its exit status when it was read from its zombie.
func (w *watchdog) ended(t *tracked, status string) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.gone {
		return
	}
	t.gone = true
	if t.leader {
		return // instanceExited records it, with the status from Wait
	}
	if t.instance != 0 && w.proc.groupExpected(t.instance) {
		return
	}
	registered := w.registeredLocked(t.id.pid)
	if !registered && !w.regExes[t.exe] {
		return // a helper of the plugin's command (a restart loop's sleep), not a plugin process
	}
	parent := ""
	if p := w.procs[t.ppid]; p != nil {
		parent = p.exe
	}
	if status == "" {
		status = fmt.Sprintf("ended; its exit status went to its parent (pid %d)", t.ppid)
	}
	// Its stderr lines are read when a check reports the death (withStderrLocked): the pipe
	// it shares with the rest of the tree may still hold its last lines now.
	w.deaths = append(w.deaths, &death{pid: t.id.pid, ppid: t.ppid, exe: t.exe, parentExe: parent, started: t.started,
		at: now, status: status, registered: registered})
}

// withStderrLocked fills in d's stderr lines if they are not read yet: those that arrived
// from its start to the start of the next process of the plugin that is not its descendant.
func (w *watchdog) withStderrLocked(d *death) death {
	if !d.stderrRead {
		d.stderr, d.stderrRead = w.proc.stderr.between(d.started, w.nextStartLocked(d.pid, d.started), stderrLines), true
	}
	return *d
}

// liveTree returns the PIDs of the live processes of instance's tree.
func (w *watchdog) liveTree(instance int) []procID {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []procID
	for _, t := range w.procs {
		if !t.gone && t.instance == instance {
			out = append(out, t.id)
		}
	}
	return out
}

// children returns the PIDs of pid's children, from every thread's children file.
func children(pid int) []int {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil
	}
	var out []int
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// exeName returns the base name of pid's executable, or "".
func exeName(pid int) string {
	p, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return ""
	}
	return filepath.Base(strings.TrimSuffix(p, " (deleted)"))
}

// waitStatusString describes a wait status as os/exec does ("exit status 1", "signal: killed").
func waitStatusString(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		return "signal: " + ws.Signal().String()
	}
	return fmt.Sprintf("wait status %#x", int(ws))
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
			out = append(out, w.withStderrLocked(d))
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
			out = append(out, w.withStderrLocked(d))
		}
	}
	return out
}

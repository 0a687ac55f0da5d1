package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of utime and stime in /proc/PID/stat. It is 100
// on every Linux architecture Go supports.
const clockTicks = 100

// pluginProcess runs the plugin command, each start in a process group of its own so that
// the whole group can be signalled and killed. It keeps the tail of the plugin's stderr and
// the CPU time of the instances that have exited, and tells onExit of every exit. It is safe
// for concurrent use.
type pluginProcess struct {
	argv   []string
	env    []string
	out    io.Writer // the plugin's stdout and stderr
	stderr *tailBuffer
	// onExit, if set, is called (without p.mu held) once per instance after it exited, with
	// its PID, when it started, how it ended and whether the suite had signalled or killed it.
	onExit func(pid int, started time.Time, status string, expected bool)

	mu      sync.Mutex
	starts  int
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current process has exited
	exitErr error         // the current process's Wait error, once done
	exitAt  time.Time
	leaders map[int]bool // every instance's PID (its process group's ID): whether the suite signalled or killed it
}

// start runs a new instance of the command. The previous one must have exited.
func (p *pluginProcess) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return errors.New("plugin process still running")
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if p.stderr != nil {
		cmd.Stderr = io.MultiWriter(p.out, p.stderr)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting plugin %q: %w", p.argv[0], err)
	}
	p.starts++
	p.cmd, p.done, p.exitErr = cmd, make(chan struct{}), nil
	if p.leaders == nil {
		p.leaders = map[int]bool{}
	}
	p.leaders[cmd.Process.Pid] = false
	done, started := p.done, time.Now()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr, p.exitAt = err, time.Now()
		status, expected := exitString(err), p.leaders[cmd.Process.Pid]
		p.mu.Unlock()
		close(done)
		if p.onExit != nil {
			p.onExit(cmd.Process.Pid, started, status, expected)
		}
	}()
	return nil
}

// exitString describes a Wait error: "exit status 0" for nil.
func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// expectExit records that the suite is about to signal or kill the current process (and
// with it its process group), so that their exits are not reported as crashes.
func (p *pluginProcess) expectExit() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		p.leaders[p.cmd.Process.Pid] = true
	}
}

// leader reports whether pid is an instance the suite started and, if so, whether the suite
// has signalled or killed it.
func (p *pluginProcess) leader(pid int) (started, expected bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	expected, started = p.leaders[pid]
	return started, expected
}

// groupExpected reports whether the suite signalled or killed the instance whose process
// group is pgid (false for a group the suite did not start).
func (p *pluginProcess) groupExpected(pgid int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leaders[pgid]
}

// count returns how many times the plugin was started.
func (p *pluginProcess) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// exited returns a channel closed when the current process exits (closed already when none
// was started).
func (p *pluginProcess) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.done
}

// alive reports whether the current process runs.
func (p *pluginProcess) alive() bool { return !isClosed(p.exited()) }

// exitStatus describes how the current process ended ("" while it runs).
func (p *pluginProcess) exitStatus() string {
	if p.alive() {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return exitString(p.exitErr)
}

// pid returns the current process's ID (also its process group's), or 0.
func (p *pluginProcess) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// signal sends sig to the current process only (as a container runtime signals PID 1).
func (p *pluginProcess) signal(sig syscall.Signal) error {
	pid := p.pid()
	if pid == 0 || !p.alive() {
		return errors.New("plugin process not running")
	}
	p.expectExit()
	return syscall.Kill(pid, sig)
}

// kill sends SIGKILL to the current process group and waits for the process to exit, at most
// timeout. Children that left the group are out of reach.
func (p *pluginProcess) kill(timeout time.Duration) {
	pid := p.pid()
	if pid == 0 {
		return
	}
	p.expectExit()
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-p.exited():
	case <-time.After(timeout):
	}
}

// procStat is what the suite reads from /proc/PID/stat.
type procStat struct {
	state     byte
	ppid      int
	pgrp      int
	ticks     int64 // utime + stime + cutime + cstime
	startTime int64 // clock ticks after boot
	exitCode  int   // a zombie's wait status (field 52, Linux 3.5 and later)
	hasExit   bool  // whether the line has field 52
}

// parseStat extracts the state (field 3), parent (4), process group (5), utime, stime, cutime
// and cstime (14 to 17), start time (22) and, when present, the exit code (52) from a /proc/PID/stat line. The command name
// (field 2) may hold spaces and parentheses, so fields are counted after its last ')'.
func parseStat(b []byte) (procStat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, false
	}
	st := procStat{state: f[0][0]}
	var err error
	if st.ppid, err = strconv.Atoi(f[1]); err != nil {
		return procStat{}, false
	}
	if st.pgrp, err = strconv.Atoi(f[2]); err != nil {
		return procStat{}, false
	}
	for _, n := range []int{14, 15, 16, 17} {
		v, err := strconv.ParseInt(f[n-3], 10, 64)
		if err != nil {
			return procStat{}, false
		}
		st.ticks += v
	}
	if st.startTime, err = strconv.ParseInt(f[22-3], 10, 64); err != nil {
		return procStat{}, false
	}
	if len(f) > 52-3 {
		if code, err := strconv.Atoi(f[52-3]); err == nil {
			st.exitCode, st.hasExit = code, true
		}
	}
	return st, true
}

// readStat reads /proc/PID/stat.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	return parseStat(b)
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

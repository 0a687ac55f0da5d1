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
// the whole group can be signalled and killed. It is safe for concurrent use.
type pluginProcess struct {
	argv []string
	env  []string
	out  io.Writer // the plugin's stdout and stderr

	mu      sync.Mutex
	starts  int
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current process has exited
	exitErr error         // the current process's Wait error, once done
	exitAt  time.Time
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
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting plugin %q: %w", p.argv[0], err)
	}
	p.starts++
	p.cmd, p.done, p.exitErr = cmd, make(chan struct{}), nil
	done := p.done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr, p.exitAt = err, time.Now()
		p.mu.Unlock()
		close(done)
	}()
	return nil
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
	if p.exitErr == nil {
		return "exit status 0"
	}
	return p.exitErr.Error()
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
	return syscall.Kill(pid, sig)
}

// kill sends SIGKILL to the current process group and waits for the process to exit, at most
// timeout. Children that left the group are out of reach.
func (p *pluginProcess) kill(timeout time.Duration) {
	pid := p.pid()
	if pid == 0 {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-p.exited():
	case <-time.After(timeout):
	}
}

// cpuTime returns the CPU time (user and system) used so far by the live processes in the
// current process's group, read from /proc.
func (p *pluginProcess) cpuTime() (time.Duration, error) {
	pgid := p.pid()
	if pgid == 0 {
		return 0, errors.New("plugin process not started")
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("reading /proc: %w", err)
	}
	var ticks int64
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		grp, used, ok := parseStat(b)
		if ok && grp == pgid {
			ticks += used
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// parseStat extracts the process group (field 5) and utime+stime (fields 14 and 15) from a
// /proc/PID/stat line. The command name (field 2) may hold spaces and parentheses, so fields
// are counted after its last ')'.
func parseStat(b []byte) (pgrp int, ticks int64, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 13 {
		return 0, 0, false
	}
	pg, err1 := strconv.Atoi(f[2])
	ut, err2 := strconv.ParseInt(f[11], 10, 64)
	st, err3 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, false
	}
	return pg, ut + st, true
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

package conformance

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// schedSample is the scheduler's account of every thread of a set of processes at one moment,
// keyed by process (PID and start time) and thread ID.
type schedSample map[string]threadSched

// threadSched is one thread's time on a CPU and time spent runnable but waiting for one, from
// /proc/PID/task/TID/schedstat (nanoseconds; needs CONFIG_SCHED_INFO).
type threadSched struct {
	cpu, wait time.Duration
	// vol and nonvol count the times the thread gave up its CPU by going to sleep and was
	// preempted (/proc/PID/task/TID/status).
	vol, nonvol int64
}

// sampleSched reads schedstat for every thread of procs. A process that ended meanwhile is
// left out; an error means the kernel does not expose schedstat.
func sampleSched(procs []procID) (schedSample, error) {
	out := schedSample{}
	for _, p := range procs {
		dir := "/proc/" + strconv.Itoa(p.pid) + "/task"
		tasks, err := os.ReadDir(dir)
		if err != nil {
			continue // ended
		}
		for _, task := range tasks {
			b, err := os.ReadFile(dir + "/" + task.Name() + "/schedstat")
			if os.IsNotExist(err) && len(tasks) > 0 {
				if _, serr := os.Stat(dir + "/" + task.Name()); serr == nil {
					return nil, fmt.Errorf("%s/%s/schedstat is missing (kernel without CONFIG_SCHED_INFO)", dir, task.Name())
				}
			}
			if err != nil {
				continue
			}
			f := strings.Fields(string(b))
			if len(f) < 2 {
				return nil, fmt.Errorf("%s/%s/schedstat: unexpected content %q", dir, task.Name(), b)
			}
			run, err1 := strconv.ParseInt(f[0], 10, 64)
			wait, err2 := strconv.ParseInt(f[1], 10, 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%s/%s/schedstat: unexpected content %q", dir, task.Name(), b)
			}
			ts := threadSched{cpu: time.Duration(run), wait: time.Duration(wait)}
			ts.vol, ts.nonvol = switches(dir + "/" + task.Name() + "/status")
			out[fmt.Sprintf("%d.%d/%s", p.pid, p.startTime, task.Name())] = ts
		}
	}
	return out, nil
}

// switches reads voluntary_ctxt_switches and nonvoluntary_ctxt_switches from a status file.
func switches(path string) (vol, nonvol int64) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "voluntary_ctxt_switches":
			vol = n
		case "nonvoluntary_ctxt_switches":
			nonvol = n
		}
	}
	return vol, nonvol
}

// cpuUse is the CPU a process tree used over a window.
type cpuUse struct {
	wall time.Duration
	// cpu is the time its threads ran on a CPU; wait the time they were runnable and waited
	// for one, because other work held every CPU (summed over threads).
	cpu, wait time.Duration
	// vol and nonvol are the tree's voluntary and involuntary context switches.
	vol, nonvol int64
	threads     int
	// lost counts the threads that ended in the window: their time since the first sample
	// is not counted.
	lost int
}

// use compares two samples taken wall apart. A thread born in the window counts from zero.
func use(s0, s1 schedSample, wall time.Duration) cpuUse {
	u := cpuUse{wall: wall, threads: len(s1)}
	for k, b := range s1 {
		a := s0[k]
		u.cpu += b.cpu - a.cpu
		u.wait += b.wait - a.wait
		u.vol += b.vol - a.vol
		u.nonvol += b.nonvol - a.nonvol
	}
	for k := range s0 {
		if _, ok := s1[k]; !ok {
			u.lost++
		}
	}
	return u
}

// saturated reports whether the tree's waits alone fill the window (its threads, waiting at
// the same time, add up to more waiting than the window less its CPU time): then its own run
// cannot be told from the waits.
func (u cpuUse) saturated() bool { return u.wall-u.wait < u.cpu }

// busy reports, for a saturated tree, whether its threads were mostly preempted rather than
// going to sleep: a busy loop is only ever switched out by preemption, an idle plugin's
// threads by going back to sleep after each short burst.
func (u cpuUse) busy() bool { return u.nonvol > u.vol }

// perSecond is the tree's CPU seconds per second of its own run: its CPU time divided by the
// window less the time it waited for a CPU that other work held. On an idle machine that is
// CPU seconds per wall second; on a busy one the time other work took is not held against the
// plugin, so a busy loop still counts about one CPU second per second, and an idle plugin's
// few milliseconds stay a few milliseconds. When the waits fill the window (saturated) it is
// 1 for a busy tree, and CPU seconds per wall second, a lower bound, otherwise.
func (u cpuUse) perSecond() float64 {
	switch {
	case u.wall <= 0:
		return 0
	case !u.saturated():
		return u.cpu.Seconds() / (u.wall - u.wait).Seconds()
	case u.busy():
		return 1
	}
	return u.cpu.Seconds() / u.wall.Seconds()
}

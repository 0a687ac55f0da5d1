package conformance

import (
	"math"
	"testing"
	"time"
)

// TestCPUPerSecondOfOwnRun (issue 44): the CPU figure does not follow the machine's load. The
// samples are what the kernel reports for an idle plugin and a busy-looping one on an idle
// machine and on one loaded far past its CPUs.
func TestCPUPerSecondOfOwnRun(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name      string
		cpu, wait time.Duration
		vol, nvol int64
		want      float64
	}{
		{"idle plugin, idle machine", 4 * ms, 1 * ms, 200, 2, 4.0 / 1999},
		{"idle plugin, loaded machine", 4 * ms, 60 * ms, 200, 10, 4.0 / 1940},
		// Its threads waited 2.17s in a 2s window, at the same time: the waits fill the
		// window, and its threads went to sleep after each burst.
		{"idle plugin, machine at load 60", 3 * ms, 2170 * ms, 150, 20, 0.0015},
		{"busy loop, idle machine", 1990 * ms, 5 * ms, 3, 40, 1990.0 / 1995},
		{"busy loop, loaded machine", 500 * ms, 1500 * ms, 3, 400, 1},
		// It got 29ms of CPU in 2s; its goroutine moved between threads that each waited.
		{"busy loop, machine at load 60", 29 * ms, 3562 * ms, 30, 900, 1},
	}
	for _, tc := range cases {
		s0 := schedSample{"1.1/1": {}}
		s1 := schedSample{"1.1/1": {cpu: tc.cpu, wait: tc.wait, vol: tc.vol, nonvol: tc.nvol}}
		u := use(s0, s1, 2*time.Second)
		if got := u.perSecond(); math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("%s: %.6f CPU seconds per second of its own run, want %.6f", tc.name, got, tc.want)
		}
		if busy := u.perSecond() >= DefaultTimings().CPULimit; busy != (tc.want >= 0.05) {
			t.Errorf("%s: over the budget: %t", tc.name, busy)
		}
	}
}

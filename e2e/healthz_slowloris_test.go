package e2e

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Bounds of the slow HTTP clients test.
const (
	// probeAnswerBound is how long a health probe may take to be answered during the
	// floods. kdm's aim is 1 s; the bound leaves twice that for a loaded machine. Before
	// health probes were admitted apart, they waited unaccepted behind the slow clients
	// until those timed out (5 s).
	probeAnswerBound = 2 * time.Second
	// probeRounds is how many rounds of /healthz, /livez and /readyz each flood gets, one
	// round every 300 ms: longer than the 5 s header timeout after which kdm closes a slow
	// client, which then comes back.
	probeRounds = 20
)

// TestHealthzProbesUnderSlowClients: one process holds 200 HTTP connections that never finish
// their request header, then four more processes hold 500 each (2,200 in all, past kdm's
// bound on pending connections, so kdm closes the oldest and the clients come back). All the
// while /healthz, /livez and /readyz, each on a fresh connection as a supervisor probes, are
// answered 200 within probeAnswerBound.
func TestHealthzProbesUnderSlowClients(t *testing.T) {
	innerLoopSkips(t, "holds 2,200 slow HTTP connections for seconds")
	n := newNode(t)
	kdm := n.startServing("8 GPUs")
	before := vmRSS(t, kdm.cmd.Process.Pid)
	for _, flood := range []struct {
		name         string
		procs, conns int
	}{
		{"one process holding 200 unfinished connections", 1, 200},
		{"four more processes holding 500 each", 4, 500},
	} {
		var procs []*process
		for range flood.procs {
			procs = append(procs, n.startHostile("slowloris", "-addr", n.healthAddr, "-conns", strconv.Itoa(flood.conns)))
		}
		waitHeld(t, procs, time.Minute)
		var worst time.Duration
		var took []time.Duration
		failed := 0
		for range probeRounds {
			for _, path := range []string{"/healthz", "/livez", "/readyz"} {
				d, err := probe(n.healthAddr, path)
				took = append(took, d)
				worst = max(worst, d)
				if err != nil {
					failed++
					t.Errorf("%s: %s during the flood: %v after %v", flood.name, path, err, d.Round(time.Millisecond))
				}
			}
			time.Sleep(300 * time.Millisecond)
		}
		stillRunning(t, procs)
		slices.Sort(took)
		t.Logf("%s: %d probes, %d failed; answered in median %v, worst %v; kdm RSS %d MiB (%d MiB before)",
			flood.name, len(took), failed, took[len(took)/2].Round(time.Millisecond), worst.Round(time.Millisecond),
			vmRSS(t, kdm.cmd.Process.Pid)>>20, before>>20)
	}
	kdm.terminate(t)
}

// probe GETs path on a fresh connection, as a supervisor's health check does, and returns how
// long it took and why it failed: no answer within probeAnswerBound, or a status other than 200.
func probe(addr, path string) (time.Duration, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := http.Client{Transport: tr, Timeout: probeAnswerBound}
	start := time.Now()
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return time.Since(start), err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return time.Since(start), fmt.Errorf("status %s: %s", resp.Status, body)
	}
	return time.Since(start), nil
}

package conformance_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// supervisor is a restart loop as a DaemonSet's restartPolicy is one: it runs the plugin
// again 0.3s after it exits, and forwards SIGTERM to it.
func supervisor(plugin ...string) []string {
	return append([]string{"sh", "-c", `trap 'kill $pid 2>/dev/null; wait $pid; exit 0' TERM; while :; do "$@" & pid=$!; wait $pid; sleep 0.3; done`, "loop"}, plugin...)
}

// TestRestartLoopChildrenDieBeforeRegistering (issue 44): under a restart loop, a plugin that
// exits when kubelet.sock is absent at start never registers until the manager appears. The
// shell the suite started stays up, yet check 5 fails, naming each child that died by PID,
// with its parent, "before it registered", and the stderr lines that child wrote, not an
// earlier process's.
func TestRestartLoopChildrenDieBeforeRegistering(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole conformance suite against real plugins; run by make test")
	}
	t.Parallel()
	rep, code := runJSON(t, []string{"--dir-flag", "device-plugin-dir"},
		supervisor(filepath.Join(binDir, "faultplugin"), "--fault", "exit-before-register")...)
	for _, c := range rep.Checks {
		want := "PASS"
		switch c.Name {
		case "manager-absent-at-start":
			want = "FAIL"
		case "health":
			want = "SKIP"
		}
		if c.Status != want {
			t.Errorf("%s: %s, want %s; evidence: %s", c.Name, c.Status, want, strings.Join(c.Evidence, " | "))
		}
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	var ev []string
	for _, c := range rep.Checks {
		if c.Name == "manager-absent-at-start" {
			ev = c.Evidence
		}
	}
	died := regexp.MustCompile(`^the plugin process pid (\d+) \(faultplugin, child of pid \d+ \w+\) died .* before it registered: `)
	line := regexp.MustCompile(`^pid (\d+) stderr: (.*)$`)
	deaths, pid := 0, ""
	for _, e := range ev {
		if m := died.FindStringSubmatch(e); m != nil {
			deaths, pid = deaths+1, m[1]
			continue
		}
		if m := line.FindStringSubmatch(e); m != nil {
			if m[1] != pid || !strings.HasPrefix(m[2], "Cannot register to kubelet service") {
				t.Errorf("stderr line %q is not the dead child's (pid %s) own", e, pid)
			}
		}
	}
	// The manager is absent for 3s; each child gives up after 1s and the loop waits 0.3s.
	if deaths < 1 {
		t.Errorf("no child death in check 5's evidence: %s", strings.Join(ev, " | "))
	}
}

// TestHealthTriggerKilledIsError (issue 44): a health trigger command that is killed is the
// suite's own step failing: check 10 is ERROR naming the step, not FAIL, and the exit status
// is 3, apart from FAIL's 1.
func TestHealthTriggerKilledIsError(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole conformance suite against real plugins; run by make test")
	}
	t.Parallel()
	rep, code := runJSON(t, []string{"--dir-flag", "device-plugin-dir", "--health-trigger", "kill -KILL $$"},
		filepath.Join(binDir, "faultplugin"))
	if got := rep.status("health"); got != "ERROR" || !strings.Contains(rep.evidence("health"), `suite step "health trigger"`) ||
		!strings.Contains(rep.evidence("health"), "signal: killed") {
		t.Errorf("health: %s, evidence %s; want ERROR naming the killed health trigger", got, rep.evidence("health"))
	}
	if code != 3 || rep.Passed || rep.Summary["ERROR"] != 1 || rep.Summary["FAIL"] != 0 {
		t.Errorf("exit %d, passed %t, summary %v; want 3, false, 1 ERROR and no FAIL", code, rep.Passed, rep.Summary)
	}
}

// TestVerdictsUnderLoad (issue 44) is the acceptance test of the verdicts' stability: while
// two busy-loop processes load the machine (on top of whatever else runs), it runs the suite
// five times against the reference plugin and each fault profile, the profiles in parallel,
// and requires every run to give each profile's expected verdicts.
func TestVerdictsUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole conformance suite 25 times under load (minutes); run by make test")
	}
	for i := 0; i < 2; i++ {
		burner := exec.Command("sh", "-c", "while :; do :; done")
		if err := burner.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = burner.Process.Kill(); _ = burner.Wait() })
	}
	health := t.TempDir()
	fault := func(name string) []string { return []string{filepath.Join(binDir, "faultplugin"), "--fault", name} }
	pass := func(except map[string]string) map[string]string {
		want := map[string]string{}
		for _, c := range []string{"registration", "list-and-watch", "allocate", "manager-restart", "manager-absent-at-start",
			"stream-close", "duplicate-registration", "idle-cpu", "sigterm", "health"} {
			want[c] = "PASS"
		}
		for k, v := range except {
			want[k] = v
		}
		return want
	}
	noHealth := map[string]string{"health": "SKIP"}
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range m {
			out[a] = b
		}
		return out
	}
	profiles := []struct {
		name   string
		flags  []string
		plugin []string
		want   map[string]string
	}{
		{"reference", []string{"--health-trigger", "echo Unhealthy > " + health + "/$KDM_CONFORMANCE_DEVICE",
			"--health-restore", "echo Healthy > " + health + "/$KDM_CONFORMANCE_DEVICE"},
			[]string{filepath.Join(binDir, "kdm-nvml-plugin"), "--mock", "dgxa100", "--health-control-dir", health}, pass(nil)},
		{"children-exit-before-registering", nil, supervisor(fault("exit-before-register")...),
			pass(with(noHealth, "manager-absent-at-start", "FAIL"))},
		{"late-duplicate-register", nil, fault("double-register-late"), pass(with(noHealth, "duplicate-registration", "WARN"))},
		{"stops-serving-after-close", nil, fault("stop-serving-after-close"), pass(with(noHealth, "stream-close", "FAIL"))},
		{"cpu-burner", nil, fault("spin"), pass(with(noHealth, "idle-cpu", "FAIL"))},
	}
	const runs = 5
	var wg sync.WaitGroup
	for _, p := range profiles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= runs; i++ {
				rep, _ := runJSON(t, append([]string{"--dir-flag", "device-plugin-dir", "--stream-close-window", "4s"}, p.flags...), p.plugin...)
				for name, want := range p.want {
					if got := rep.status(name); got != want {
						t.Errorf("%s, run %d of %d: %s is %s, want %s; evidence: %s", p.name, i, runs, name, got, want, rep.evidence(name))
					}
				}
				t.Logf("%s, run %d of %d: %v", p.name, i, runs, summary(rep))
			}
		}()
	}
	wg.Wait()
}

// summary is a run's verdicts in check order, for the log.
func summary(rep jsonReport) string {
	var b strings.Builder
	for _, c := range rep.Checks {
		fmt.Fprintf(&b, "%d:%s ", c.ID, c.Status)
	}
	return strings.TrimSpace(b.String())
}

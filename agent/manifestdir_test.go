package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
)

// runLogged starts an agent with cfg (directories from f) whose log is kept in memory, and
// returns it with a function returning the log so far. The agent stops when the test ends.
func (f *fixture) runLogged(cfg Config) (*Agent, func() string) {
	f.t.Helper()
	cfg.RootDir, cfg.DevicePluginDir = f.root, f.plugins
	logger := ktesting.NewLogger(f.t, ktesting.NewConfig(ktesting.Verbosity(4), ktesting.BufferLogs(true)))
	cfg.Logger = logger
	a, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("Run: %v", err)
		}
	})
	f.waitFor(a, "kubelet.sock", func(NodeStatus) bool {
		_, err := os.Stat(filepath.Join(f.plugins, "kubelet.sock"))
		return err == nil
	})
	return a, func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }
}

// waitLog waits until the log holds every one of want.
func (f *fixture) waitLog(logs func() string, want ...string) {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := logs()
		missing := ""
		for _, w := range want {
			if !strings.Contains(got, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %q in the log:\n%s", missing, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestManifestPathMissingIsWatched: a --pod-manifest-path that does not exist is logged at start
// and not created; the agent is ready meanwhile; once an operator creates it (two levels deep,
// one level at a time) its pods are admitted through the file watch alone: the resync period is
// an hour.
func TestManifestPathMissingIsWatched(t *testing.T) {
	f := newFixture(t)
	missing := filepath.Join(f.base, "typo", "pods")
	a, logs := f.runLogged(Config{PodManifestPath: missing, ResyncPeriod: time.Hour})
	f.plugin("g0", "g1")
	f.waitFor(a, "2 devices", func(st NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	f.waitLog(logs, "Pod manifest path does not exist; watching for it to appear", `path="`+missing+`"`)
	if !a.ready.Load() {
		t.Fatalf("a missing manifest directory holds up readiness")
	}
	if _, err := os.Stat(filepath.Join(f.base, "typo")); !os.IsNotExist(err) {
		t.Fatalf("the agent created (part of) the missing manifest path: %v", err)
	}

	if err := os.Mkdir(filepath.Join(f.base, "typo"), 0o750); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the watch move down one level
	if err := os.Mkdir(missing, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(missing, "late.yaml"), []byte(manifestBody("late", "uid-late", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	f.waitFor(a, "late admitted", func(st NodeStatus) bool { p := phase(st, "late"); return p != nil && p.Phase == PhaseAdmitted })
	f.waitLog(logs, "Pod manifest path appeared; admitting its pods")
	if n := strings.Count(logs(), "Pod manifest path does not exist"); n != 1 {
		t.Fatalf("the missing path was logged %d times, want once", n)
	}
}

// TestManifestHalfWrittenIsNotReported: a manifest written in two pieces a moment apart, as cp or
// a shell heredoc may, is admitted without the half-written version being logged as invalid; a
// file that stays invalid is still reported, once it has been left alone for manifestDebounce.
func TestManifestHalfWrittenIsNotReported(t *testing.T) {
	f := newFixture(t)
	a, logs := f.runLogged(Config{PodManifestPath: f.pods, ResyncPeriod: time.Hour})
	f.plugin("g0", "g1")
	f.waitFor(a, "2 devices", func(st NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })

	body := manifestBody("copied", "uid-copied", 1)
	cut := strings.Index(body, "name:") + 3 // "metadata:\n  nam": no name yet
	file, err := os.Create(filepath.Join(f.pods, "copied.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteString(body[:cut]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond) // past the 20 ms event coalescing, within manifestDebounce
	if _, err := file.WriteString(body[cut:]); err != nil {
		t.Fatal(err)
	}
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}
	f.waitFor(a, "copied admitted", func(st NodeStatus) bool { p := phase(st, "copied"); return p != nil && p.Phase == PhaseAdmitted })
	if strings.Contains(logs(), "Skipped pod manifest") {
		t.Fatalf("the half-written manifest was reported:\n%s", logs())
	}

	// A manifest that stays broken is reported, with no further event to prompt the read.
	if err := os.WriteFile(filepath.Join(f.pods, "broken.yaml"), []byte("kind: Service\nmetadata: {name: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.waitLog(logs, "Skipped pod manifest", `broken.yaml: kind is \"Service\"`)
}

// TestManifestDebounce: on the source's own clock, new content is held back, with a retry asked
// for, while younger than manifestDebounce, and judged after: a file that cannot be used is
// reported, and a good file, whose first part may already be a valid pod, is used. A file
// stamped ahead of the clock is judged at once.
func TestManifestDebounce(t *testing.T) {
	s := newTestSource(t)
	clock := time.Now()
	s.now = func() time.Time { return clock }
	s.write("a.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  na")
	fi, err := os.Stat(filepath.Join(s.dir, "a.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	written := stampOf(fi).changedAt()

	clock = written.Add(manifestDebounce / 4)
	if pods, problems := s.mustScan(); len(pods) != 0 || len(problems) != 0 {
		t.Fatalf("young partial file: pods %v, problems %v; want nothing yet", pods, problems)
	}
	if d := s.retryIn(); d <= 0 || d > manifestDebounce {
		t.Fatalf("retryIn %v, want a retry within %v", d, manifestDebounce)
	}
	clock = written.Add(manifestDebounce)
	if _, problems := s.mustScan(); len(problems) != 1 || !strings.Contains(problems[0], "a.yaml: not a valid pod") {
		t.Fatalf("settled partial file: problems %v, want it reported", problems)
	}
	if d := s.retryIn(); d != 0 {
		t.Fatalf("retryIn %v after the file was judged, want 0", d)
	}

	// A good file waits out the debounce too: it may be the first part of a longer pod.
	s.write("b.yaml", manifestBody("b", "uid-b", 1))
	fi, err = os.Stat(filepath.Join(s.dir, "b.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	written = stampOf(fi).changedAt()
	clock = written.Add(manifestDebounce / 2)
	if pods, _ := s.mustScan(); len(pods) != 0 {
		t.Fatalf("young good file: pods %v, want nothing yet", pods)
	}
	if d := s.retryIn(); d <= 0 || d > manifestDebounce/2 {
		t.Fatalf("retryIn %v for the young good file, want a retry within %v", d, manifestDebounce/2)
	}
	clock = written.Add(manifestDebounce)
	if pods, _ := s.mustScan(); pods["b"] != "uid-b" {
		t.Fatalf("settled good file: pods %v", pods)
	}

	// A file stamped ahead of the source's clock is judged at once.
	s.write("c.yaml", manifestBody("c", "uid-c", 1))
	clock = time.Now().Add(-time.Second)
	if pods, _ := s.mustScan(); pods["c"] != "uid-c" {
		t.Fatalf("file stamped ahead of the clock: pods %v", pods)
	}
}

// writeInTwoParts writes body over the file in place (truncating it) as two writes, pause apart,
// cut where the first part is itself a valid pod: the containers are written, the resources not
// yet.
func writeInTwoParts(t *testing.T, path, body string, pause time.Duration) {
	t.Helper()
	cut := strings.Index(body, "    resources:")
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteString(body[:cut]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	if _, err := file.WriteString(body[cut:]); err != nil {
		t.Fatal(err)
	}
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestManifestValidPrefixIsNotAdmitted: a manifest written in place whose first part is already
// a valid pod, one asking for no device, is admitted only as the whole file, with its device.
func TestManifestValidPrefixIsNotAdmitted(t *testing.T) {
	f := newFixture(t)
	a, _ := f.runWith(Config{PodManifestPath: f.pods, ResyncPeriod: time.Hour})
	f.plugin("g0", "g1")
	f.waitFor(a, "2 devices", func(st NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })

	// 60 ms: past the 20 ms event coalescing, within manifestDebounce.
	writeInTwoParts(t, filepath.Join(f.pods, "prefix.yaml"), manifestBody("prefix", "uid-prefix", 1), 60*time.Millisecond)
	st := f.waitFor(a, "prefix admitted", func(st NodeStatus) bool { p := phase(st, "prefix"); return p != nil && p.Phase == PhaseAdmitted })
	p := phase(st, "prefix")
	if got := a.Manager().GetDevices(string(p.UID), "main")["example.com/gpu"]; len(got) != 1 || p.Warning != "" {
		t.Fatalf("prefix holds %v with warning %q; want 1 device and no warning (the half-written version was admitted)", got, p.Warning)
	}
}

// TestRestartWhileAManifestIsRewritten: a pod admitted before a restart whose file is being
// rewritten in place when the agent starts again keeps its devices: the first listing waits for
// the file to settle instead of counting the pod as gone and releasing its devices.
func TestRestartWhileAManifestIsRewritten(t *testing.T) {
	f := newFixture(t)
	a, stop := f.runWith(Config{PodManifestPath: f.pods, ResyncPeriod: time.Hour})
	f.plugin("g0", "g1")
	f.waitFor(a, "2 devices", func(st NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	path := filepath.Join(f.pods, "keeper.yaml")
	body := manifestBody("keeper", "uid-keeper", 1)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f.waitFor(a, "keeper admitted", func(st NodeStatus) bool { p := phase(st, "keeper"); return p != nil && p.Phase == PhaseAdmitted })
	before := fmt.Sprint(a.Manager().GetDevices("uid-keeper", "main"))
	stop()

	// The file is cut short (truncated, one byte written) when the agent starts again, and
	// written whole a moment later.
	if err := os.WriteFile(path, []byte(body[:1]), 0o600); err != nil {
		t.Fatal(err)
	}
	b, logs := f.runLogged(Config{PodManifestPath: f.pods, ResyncPeriod: time.Hour})
	time.Sleep(50 * time.Millisecond)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f.waitFor(b, "keeper restored", func(st NodeStatus) bool { p := phase(st, "keeper"); return p != nil && p.Phase == PhaseAdmitted })
	if after := fmt.Sprint(b.Manager().GetDevices("uid-keeper", "main")); after != before {
		t.Fatalf("keeper held %s before the restart, %s after", before, after)
	}
	if strings.Contains(logs(), "devices released") {
		t.Fatalf("keeper was released while its file was being rewritten:\n%s", logs())
	}
}

// TestManifestBurstSettlesTogether: on the source's own clock, new pods wait until no manifest
// of the directory has changed for manifestDebounce, so files that arrive together are judged
// together; a file manifestSettle old is judged however busy the directory stays; and a valid
// pod the agent admitted before a restart and has not seen since is judged at once.
func TestManifestBurstSettlesTogether(t *testing.T) {
	s := newTestSource(t)
	clock := time.Now()
	s.now = func() time.Time { return clock }
	stamp := func(name string) time.Time {
		fi, err := os.Stat(filepath.Join(s.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return stampOf(fi).changedAt()
	}
	s.write("a.yaml", manifestBody("a", "uid-a", 1))
	time.Sleep(20 * time.Millisecond)
	s.write("b.yaml", manifestBody("b", "uid-b", 1))
	a, b := stamp("a.yaml"), stamp("b.yaml")
	if !b.After(a) {
		t.Skipf("the file system gave both files the same change time (%v)", a)
	}

	// a alone is old enough, but b, written after it, is not: neither is judged.
	clock = a.Add(manifestDebounce)
	if pods, _ := s.mustScan(); len(pods) != 0 {
		t.Fatalf("pods %v while the directory is still changing, want none", pods)
	}
	if d := s.retryIn(); d <= 0 || d > b.Sub(a)+time.Millisecond {
		t.Fatalf("retryIn %v, want a retry when b is settled (%v)", d, b.Sub(a))
	}
	clock = b.Add(manifestDebounce)
	if pods, _ := s.mustScan(); pods["a"] != "uid-a" || pods["b"] != "uid-b" {
		t.Fatalf("settled directory: pods %v, want a and b together", pods)
	}

	// A pod admitted before a restart and not seen since is judged at once, young as its
	// file is.
	s.known = func(uid types.UID) bool { return uid == "uid-k" }
	s.write("k.yaml", manifestBody("k", "uid-k", 1))
	s.write("n.yaml", manifestBody("n", "uid-n", 1))
	clock = stamp("n.yaml")
	if pods, _ := s.mustScan(); pods["k"] != "uid-k" || pods["n"] != "" {
		t.Fatalf("young files: pods %v, want the known k and not the new n", pods)
	}

	// A directory that never settles holds a file back for manifestSettle at most: here
	// another file changed just now, at every moment.
	changed := stamp("n.yaml")
	at := func(t time.Time) fileStamp {
		ts := syscall.NsecToTimespec(t.UnixNano())
		return fileStamp{mtime: ts, ctime: ts}
	}
	for _, c := range []struct {
		age  time.Duration
		held bool
	}{{manifestDebounce, true}, {manifestSettle - time.Millisecond, true}, {manifestSettle, false}} {
		clock = changed.Add(c.age)
		s.lastChange = clock
		if got := s.holdBack(at(changed)); got != c.held {
			t.Errorf("file %v old in a busy directory: held back %v, want %v", c.age, got, c.held)
		}
	}
}

// TestRunningPodRewrittenInPlaceQuietly: rewriting the manifest of a running pod in place, in
// two writes whose first part is a valid pod without resources, changes nothing and logs no
// warning: the partial version is never judged.
func TestRunningPodRewrittenInPlaceQuietly(t *testing.T) {
	f := newFixture(t)
	a, logs := f.runLogged(Config{PodManifestPath: f.pods, ResyncPeriod: time.Hour})
	f.plugin("g0", "g1")
	f.waitFor(a, "2 devices", func(st NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	path := filepath.Join(f.pods, "steady.yaml")
	body := manifestBody("steady", "uid-steady", 1)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f.waitFor(a, "steady admitted", func(st NodeStatus) bool { p := phase(st, "steady"); return p != nil && p.Phase == PhaseAdmitted })
	before := fmt.Sprint(a.Manager().GetDevices("uid-steady", "main"))

	writeInTwoParts(t, path, body, 60*time.Millisecond)
	// A pod written after the rewrite is judged with it or later, once the directory settles:
	// when it is admitted, the rewritten file has been judged too.
	f.manifest("marker", 1)
	f.waitFor(a, "marker admitted", func(st NodeStatus) bool { p := phase(st, "marker"); return p != nil && p.Phase == PhaseAdmitted })
	if strings.Contains(logs(), "Pod's source changed") {
		t.Fatalf("the half-written version was judged:\n%s", logs())
	}
	st := a.Status()
	if p := phase(st, "steady"); p == nil || p.Phase != PhaseAdmitted || p.Warning != "" {
		t.Fatalf("steady after the rewrite: %+v", p)
	}
	if after := fmt.Sprint(a.Manager().GetDevices("uid-steady", "main")); after != before {
		t.Fatalf("steady held %s, now %s", before, after)
	}
}

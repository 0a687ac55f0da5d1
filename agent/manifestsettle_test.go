package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// noUIDBody is a pod manifest without metadata.uid (its UID derives from its content) whose
// container asks for gpus devices; image tells two versions of one pod apart.
func noUIDBody(name, image string, gpus int) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  containers:\n  - name: main\n    image: %s\n    resources:\n      limits:\n        example.com/gpu: %d\n", name, image, gpus)
}

// validHalf is the first part of body that is already a valid pod: the containers are
// written, their resources not yet.
func validHalf(body string) string { return body[:strings.Index(body, "    resources:")] }

// changedAt is the file's change time as the source sees it.
func changedAt(t *testing.T, path string) time.Time {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return stampOf(fi).changedAt()
}

// leasesWork skips the test where the kernel or file system refuses read leases, the only way
// the source tells an open writer.
func leasesWork(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, ".probe")
	w, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Remove(path) }()
	_, writing, err := openWriters(path)
	_ = w.Close()
	if err != nil || !writing {
		t.Skipf("read leases do not reveal open writers here (%v)", err)
	}
}

// TestManifestIdentityChangeWaitsToSettle: on the source's own clock, new content that gives a
// file's pod another UID (a manifest without metadata.uid, rewritten in place with a first
// part that is already a valid pod) keeps the running pod until it has stood unchanged for
// manifestIdentitySettle, with a retry asked for, and replaces it after. New content of the
// same UID waits only for the directory to settle; so does the pod of a new file.
func TestManifestIdentityChangeWaitsToSettle(t *testing.T) {
	s := newTestSource(t)
	path := filepath.Join(s.dir, "a.yaml")
	full := noUIDBody("a", "x", 2)
	s.write("a.yaml", full)
	pods, _ := s.mustScan()
	running := pods["a"]
	if running == "" {
		t.Fatalf("pods %v, want a", pods)
	}

	s.write("a.yaml", validHalf(full))
	written := changedAt(t, path)
	clock := written.Add(manifestDebounce)
	s.now = func() time.Time { return clock }
	if pods, problems := s.mustScan(); pods["a"] != running || len(problems) != 0 {
		t.Fatalf("half written %v ago: pods %v, problems %v; want the running pod %s kept", manifestDebounce, pods, problems, running)
	}
	if d := s.retryIn(); d <= 0 || d > manifestIdentitySettle {
		t.Fatalf("retryIn %v, want a retry within %v", d, manifestIdentitySettle)
	}
	clock = written.Add(manifestIdentitySettle - time.Millisecond)
	if pods, _ := s.mustScan(); pods["a"] != running {
		t.Fatalf("half written just under %v ago: pods %v, want %s kept", manifestIdentitySettle, pods, running)
	}
	// Written back whole within the settle time, the file is its running pod again.
	s.write("a.yaml", full)
	clock = changedAt(t, path).Add(manifestIdentitySettle)
	if pods, _ := s.mustScan(); pods["a"] != running {
		t.Fatalf("written back whole: pods %v, want %s", pods, running)
	}

	// A real replacement (here renamed into place) takes effect once it has settled.
	tmp := filepath.Join(s.dir, ".a.tmp")
	if err := os.WriteFile(tmp, []byte(noUIDBody("a", "y", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	replaced := changedAt(t, path)
	clock = replaced.Add(manifestDebounce)
	if pods, _ := s.mustScan(); pods["a"] != running {
		t.Fatalf("replacement %v old: pods %v, want %s kept", manifestDebounce, pods, running)
	}
	clock = replaced.Add(manifestIdentitySettle)
	if pods, _ := s.mustScan(); pods["a"] == running || pods["a"] == "" {
		t.Fatalf("replacement settled: pods %v, want the new pod instead of %s", pods, running)
	}

	// Same UID, another request: no identity change, judged once the directory settles.
	s.write("b.yaml", manifestBody("b", "uid-b", 1))
	clock = time.Now().Add(time.Hour)
	s.mustScan()
	s.write("b.yaml", manifestBody("b", "uid-b", 2))
	clock = changedAt(t, filepath.Join(s.dir, "b.yaml")).Add(manifestDebounce)
	all, _, err := s.scan()
	if err != nil {
		t.Fatal(err)
	}
	if got := all["uid-b"].pod.Spec.Containers[0].Resources.Limits["example.com/gpu"]; got.Value() != 2 {
		t.Fatalf("same-UID edit %v old: pod b asks %v, want the new 2", manifestDebounce, got.String())
	}
}

// TestManifestOpenWriterHoldsContent: content is judged only once its writer has closed the
// file: neither a new file nor a running pod's file that a process holds open for writing is
// judged, however settled its content looks, until the writer closes it or has sat idle for
// manifestWriterWait. A retry is asked for meanwhile, as closing raises no event.
func TestManifestOpenWriterHoldsContent(t *testing.T) {
	s := newTestSource(t)
	leasesWork(t, s.dir)
	open := func(name, content string) *os.File {
		w, err := os.OpenFile(filepath.Join(s.dir, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteString(content); err != nil {
			t.Fatal(err)
		}
		return w
	}
	var clock time.Time
	s.now = func() time.Time { return clock }

	w := open("new.yaml", manifestBody("new", "uid-new", 1))
	clock = changedAt(t, filepath.Join(s.dir, "new.yaml")).Add(2 * manifestIdentitySettle)
	if pods, problems := s.mustScan(); len(pods) != 0 || len(problems) != 0 {
		t.Fatalf("new file open for writing: pods %v, problems %v; want nothing yet", pods, problems)
	}
	if d := s.retryIn(); d <= 0 || d > manifestWriterPoll {
		t.Fatalf("retryIn %v, want a retry within %v", d, manifestWriterPoll)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if pods, _ := s.mustScan(); pods["new"] != "uid-new" {
		t.Fatalf("closed: pods %v, want new", pods)
	}

	full := noUIDBody("a", "x", 2)
	s.write("a.yaml", full)
	pods, _ := s.mustScan()
	running := pods["a"]
	w = open("a.yaml", validHalf(full))
	defer func() { _ = w.Close() }()
	written := changedAt(t, filepath.Join(s.dir, "a.yaml"))
	clock = written.Add(2 * manifestIdentitySettle)
	if pods, _ := s.mustScan(); pods["a"] != running {
		t.Fatalf("half of a running pod's file, open for writing: pods %v, want %s kept", pods, running)
	}
	clock = written.Add(manifestWriterWait)
	if pods, _ := s.mustScan(); pods["a"] == running {
		t.Fatalf("writer idle for %v: pods %v, want the file's content judged", manifestWriterWait, pods)
	}
}

// TestManifestRestartKeepsRunningPodOfRewrittenFile: after a restart the source does not know
// which file held a running pod; new content that names a pod admitted before the restart and
// not seen since, with another UID, is that pod's identity change and waits to settle.
func TestManifestRestartKeepsRunningPodOfRewrittenFile(t *testing.T) {
	s := newTestSource(t)
	s.known = func(uid types.UID) bool { return uid == "uid-running" }
	s.restored = map[string][]types.UID{"default/a": {"uid-running"}}
	s.write("a.yaml", validHalf(noUIDBody("a", "x", 2)))
	s.write("other.yaml", noUIDBody("other", "x", 1))
	written := changedAt(t, filepath.Join(s.dir, "other.yaml"))
	clock := written.Add(manifestDebounce)
	s.now = func() time.Time { return clock }
	if pods, _ := s.mustScan(); pods["a"] != "" || pods["other"] == "" {
		t.Fatalf("young files after a restart: pods %v, want other and not a's new identity", pods)
	}
	if d := s.retryIn(); d <= 0 || d > manifestIdentitySettle {
		t.Fatalf("retryIn %v, want a retry within %v", d, manifestIdentitySettle)
	}
	clock = written.Add(manifestIdentitySettle)
	if pods, _ := s.mustScan(); pods["a"] == "" {
		t.Fatalf("settled: pods %v, want a's new identity", pods)
	}
}

// TestManifestSlowRewriteKeepsRunningPod: a running pod without metadata.uid whose file is
// rewritten in place, slowly, with a first part that is a valid pod asking for no device,
// keeps its devices: a pod written meanwhile does not get them, and nothing is released. A
// real replacement, renamed into place, takes the pod's place once it has settled: a pod
// written after it is admitted while the old pod still runs.
func TestManifestSlowRewriteKeepsRunningPod(t *testing.T) {
	f := newFixture(t)
	a, logs := f.runLogged(Config{PodManifestPath: f.pods, ResyncPeriod: time.Hour})
	f.plugin("g0", "g1")
	f.waitFor(a, "2 devices", func(st NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	path := filepath.Join(f.pods, "a.yaml")
	full := noUIDBody("a", "x", 2)
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	st := f.waitFor(a, "a admitted", func(st NodeStatus) bool { p := phase(st, "a"); return p != nil && p.Phase == PhaseAdmitted })
	running := phase(st, "a").UID
	before := fmt.Sprint(a.Manager().GetDevices(string(running), "main"))

	w, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString(validHalf(full)); err != nil {
		t.Fatal(err)
	}
	f.manifest("b", 2)
	// b is judged once the directory settles; the half is as old by then, its writer open.
	f.waitFor(a, "b decided", func(st NodeStatus) bool { p := phase(st, "b"); return p != nil && p.Phase != PhasePending })
	time.Sleep(300 * time.Millisecond) // the writer pauses
	if _, err := w.WriteString(full[len(validHalf(full)):]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.manifest("marker", 0)
	st = f.waitFor(a, "marker admitted", func(st NodeStatus) bool { p := phase(st, "marker"); return p != nil && p.Phase == PhaseAdmitted })
	if p := phase(st, "a"); p == nil || p.UID != running || p.Phase != PhaseAdmitted {
		t.Fatalf("a after the slow rewrite: %+v, want %s admitted", p, running)
	}
	if after := fmt.Sprint(a.Manager().GetDevices(string(running), "main")); after != before {
		t.Fatalf("a held %s, now %s", before, after)
	}
	if p := phase(st, "b"); p.Phase != PhaseRejected {
		t.Fatalf("b asked for the 2 devices a holds and is %s %q", p.Phase, p.Message)
	}
	if strings.Contains(logs(), "devices released") {
		t.Fatalf("a pod was released during the slow rewrite:\n%s", logs())
	}

	// A real replacement: a new version of a, renamed into place.
	tmp := filepath.Join(f.pods, ".a.tmp")
	if err := os.WriteFile(tmp, []byte(noUIDBody("a", "y", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	f.manifest("marker2", 0)
	st = f.waitFor(a, "marker2 admitted", func(st NodeStatus) bool { p := phase(st, "marker2"); return p != nil && p.Phase == PhaseAdmitted })
	if p := phase(st, "a"); p == nil || p.UID != running {
		t.Fatalf("a right after its replacement: %+v, want %s until the replacement settles", p, running)
	}
	st = f.waitFor(a, "a replaced", func(st NodeStatus) bool {
		p := phase(st, "a")
		return p != nil && p.UID != running && p.Phase == PhaseAdmitted
	})
	if got := a.Manager().GetDevices(string(phase(st, "a").UID), "main")["example.com/gpu"]; len(got) != 1 {
		t.Fatalf("the replacement holds %v, want 1 device", got)
	}
	f.waitLog(logs, "Pod removed; devices released", `podUID="`+string(running)+`"`)
}

// TestRestartWhileAHalfManifestIsOnDisk: a pod without metadata.uid admitted before a restart,
// whose file holds the valid first part of a rewrite when the agent starts again, keeps its
// devices until the rest is written: the half, another identity of the pod's name, has not
// settled, and the first listing waits for it instead of counting the pod as gone.
func TestRestartWhileAHalfManifestIsOnDisk(t *testing.T) {
	f := newFixture(t)
	a, stop := f.runWith(Config{PodManifestPath: f.pods, ResyncPeriod: time.Hour})
	f.plugin("g0", "g1")
	f.waitFor(a, "2 devices", func(st NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	path := filepath.Join(f.pods, "keeper.yaml")
	full := noUIDBody("keeper", "x", 1)
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	st := f.waitFor(a, "keeper admitted", func(st NodeStatus) bool { p := phase(st, "keeper"); return p != nil && p.Phase == PhaseAdmitted })
	running := phase(st, "keeper").UID
	before := fmt.Sprint(a.Manager().GetDevices(string(running), "main"))
	stop()

	if err := os.WriteFile(path, []byte(validHalf(full)), 0o600); err != nil {
		t.Fatal(err)
	}
	b, logs := f.runLogged(Config{PodManifestPath: f.pods, ResyncPeriod: time.Hour})
	// A pod written after the restart is judged once the directory settles, the half with it.
	f.manifest("marker", 0)
	f.waitFor(b, "marker admitted", func(st NodeStatus) bool { p := phase(st, "marker"); return p != nil && p.Phase == PhaseAdmitted })
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	f.waitFor(b, "ready", func(NodeStatus) bool { return b.ready.Load() })
	st = f.waitFor(b, "keeper restored", func(st NodeStatus) bool { p := phase(st, "keeper"); return p != nil && p.Phase == PhaseAdmitted })
	if p := phase(st, "keeper"); p.UID != running {
		t.Fatalf("keeper after the restart: %+v, want %s", p, running)
	}
	if after := fmt.Sprint(b.Manager().GetDevices(string(running), "main")); after != before {
		t.Fatalf("keeper held %s before the restart, %s after", before, after)
	}
	if strings.Contains(logs(), "devices released") {
		t.Fatalf("keeper was released while its file held half a rewrite:\n%s", logs())
	}
}

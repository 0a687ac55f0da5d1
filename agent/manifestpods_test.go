package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
)

func manifestBody(name, uid string, gpus int) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  uid: %s\nspec:\n  containers:\n  - name: main\n    image: x\n    resources:\n      limits:\n        example.com/gpu: %d\n", name, uid, gpus)
}

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
	f.waitFor(a, "kubelet.sock", func(statusapi.NodeStatus) bool {
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

// TestInvalidEditKeepsAdmittedPod: a manifest edited into an invalid pod with the same UID
// keeps the admitted pod and its device, with a warning that goes once the manifest is fixed;
// a new invalid pod is rejected with ReasonInvalidPod and gets nothing.
func TestInvalidEditKeepsAdmittedPod(t *testing.T) {
	f := newFixture(t)
	a, _ := f.run()
	f.plugin("g0", "g1")
	f.waitFor(a, "2 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(f.pods, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	good := manifestBody("keep", "uid-keep", 1)
	write("keep.yaml", good)
	f.waitFor(a, "keep admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "keep")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	devices := a.Manager().GetDevices("uid-keep", "main")["example.com/gpu"]
	if len(devices) != 1 {
		t.Fatalf("keep holds %v", devices)
	}
	write("keep.yaml", strings.Replace(good, "gpu: 1", "gpu: 0.5", 1))
	st := f.waitFor(a, "keep warned", func(st statusapi.NodeStatus) bool { p := phase(st, "keep"); return p != nil && p.Warning != "" })
	if p := phase(st, "keep"); p.Phase != podresult.PhaseAdmitted || !strings.Contains(p.Warning, "invalid") || !strings.Contains(p.Warning, "example.com/gpu") {
		t.Fatalf("keep after the invalid edit: %+v", p)
	}
	if got := a.Manager().GetDevices("uid-keep", "main")["example.com/gpu"]; fmt.Sprint(got) != fmt.Sprint(devices) {
		t.Fatalf("keep's devices changed from %v to %v", devices, got)
	}
	write("keep.yaml", good)
	f.waitFor(a, "warning cleared", func(st statusapi.NodeStatus) bool {
		p := phase(st, "keep")
		return p != nil && p.Warning == "" && p.Phase == podresult.PhaseAdmitted
	})

	write("neg.yaml", strings.Replace(manifestBody("neg", "uid-neg", 1), "gpu: 1", "gpu: -1", 1))
	st = f.waitFor(a, "neg rejected", func(st statusapi.NodeStatus) bool {
		p := phase(st, "neg")
		return p != nil && p.Phase == podresult.PhaseRejected
	})
	if p := phase(st, "neg"); p.Reason != ReasonInvalidPod || !strings.Contains(p.Message, "limits[example.com/gpu]") {
		t.Fatalf("neg: %+v", p)
	}
	if got := a.Manager().GetDevices("uid-neg", "main"); len(got) != 0 {
		t.Fatalf("invalid pod holds %v", got)
	}
	// Fixed under the same UID, the pod is judged again and admitted.
	write("neg.yaml", manifestBody("neg", "uid-neg", 1))
	f.waitFor(a, "neg admitted once fixed", func(st statusapi.NodeStatus) bool {
		p := phase(st, "neg")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
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
	f.waitFor(a, "2 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
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
	f.waitFor(a, "late admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "late")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
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
	f.waitFor(a, "2 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })

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
	f.waitFor(a, "copied admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "copied")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	if strings.Contains(logs(), "Skipped pod manifest") {
		t.Fatalf("the half-written manifest was reported:\n%s", logs())
	}

	// A manifest that stays broken is reported, with no further event to prompt the read.
	if err := os.WriteFile(filepath.Join(f.pods, "broken.yaml"), []byte("kind: Service\nmetadata: {name: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.waitLog(logs, "Skipped pod manifest", `broken.yaml: kind is \"Service\"`)
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
	f.waitFor(a, "2 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })

	// 60 ms: past the 20 ms event coalescing, within manifestDebounce.
	writeInTwoParts(t, filepath.Join(f.pods, "prefix.yaml"), manifestBody("prefix", "uid-prefix", 1), 60*time.Millisecond)
	st := f.waitFor(a, "prefix admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "prefix")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
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
	f.waitFor(a, "2 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	path := filepath.Join(f.pods, "keeper.yaml")
	body := manifestBody("keeper", "uid-keeper", 1)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f.waitFor(a, "keeper admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "keeper")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
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
	f.waitFor(b, "keeper restored", func(st statusapi.NodeStatus) bool {
		p := phase(st, "keeper")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	if after := fmt.Sprint(b.Manager().GetDevices("uid-keeper", "main")); after != before {
		t.Fatalf("keeper held %s before the restart, %s after", before, after)
	}
	if strings.Contains(logs(), "devices released") {
		t.Fatalf("keeper was released while its file was being rewritten:\n%s", logs())
	}
}

// TestRunningPodRewrittenInPlaceQuietly: rewriting the manifest of a running pod in place, in
// two writes whose first part is a valid pod without resources, changes nothing and logs no
// warning: the partial version is never judged.
func TestRunningPodRewrittenInPlaceQuietly(t *testing.T) {
	f := newFixture(t)
	a, logs := f.runLogged(Config{PodManifestPath: f.pods, ResyncPeriod: time.Hour})
	f.plugin("g0", "g1")
	f.waitFor(a, "2 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	path := filepath.Join(f.pods, "steady.yaml")
	body := manifestBody("steady", "uid-steady", 1)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f.waitFor(a, "steady admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "steady")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	before := fmt.Sprint(a.Manager().GetDevices("uid-steady", "main"))

	writeInTwoParts(t, path, body, 60*time.Millisecond)
	// A pod written after the rewrite is judged with it or later, once the directory settles:
	// when it is admitted, the rewritten file has been judged too.
	f.manifest("marker", 1)
	f.waitFor(a, "marker admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "marker")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	if strings.Contains(logs(), "Pod's source changed") {
		t.Fatalf("the half-written version was judged:\n%s", logs())
	}
	st := a.Status()
	if p := phase(st, "steady"); p == nil || p.Phase != podresult.PhaseAdmitted || p.Warning != "" {
		t.Fatalf("steady after the rewrite: %+v", p)
	}
	if after := fmt.Sprint(a.Manager().GetDevices("uid-steady", "main")); after != before {
		t.Fatalf("steady held %s, now %s", before, after)
	}
}

// noUIDBody is a pod manifest without metadata.uid (its UID derives from its content) whose
// container asks for gpus devices; image tells two versions of one pod apart.
func noUIDBody(name, image string, gpus int) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  containers:\n  - name: main\n    image: %s\n    resources:\n      limits:\n        example.com/gpu: %d\n", name, image, gpus)
}

// validHalf is the first part of body that is already a valid pod: the containers are
// written, their resources not yet.
func validHalf(body string) string { return body[:strings.Index(body, "    resources:")] }

// TestManifestSlowRewriteKeepsRunningPod: a running pod without metadata.uid whose file is
// rewritten in place, slowly, with a first part that is a valid pod asking for no device,
// keeps its devices: a pod written meanwhile does not get them, and nothing is released. A
// real replacement, renamed into place, takes the pod's place once it has settled: a pod
// written after it is admitted while the old pod still runs.
func TestManifestSlowRewriteKeepsRunningPod(t *testing.T) {
	f := newFixture(t)
	a, logs := f.runLogged(Config{PodManifestPath: f.pods, ResyncPeriod: time.Hour})
	f.plugin("g0", "g1")
	f.waitFor(a, "2 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	path := filepath.Join(f.pods, "a.yaml")
	full := noUIDBody("a", "x", 2)
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	st := f.waitFor(a, "a admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "a")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
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
	f.waitFor(a, "b decided", func(st statusapi.NodeStatus) bool {
		p := phase(st, "b")
		return p != nil && p.Phase != podresult.PhasePending
	})
	time.Sleep(300 * time.Millisecond) // the writer pauses
	if _, err := w.WriteString(full[len(validHalf(full)):]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.manifest("marker", 0)
	st = f.waitFor(a, "marker admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "marker")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	if p := phase(st, "a"); p == nil || p.UID != running || p.Phase != podresult.PhaseAdmitted {
		t.Fatalf("a after the slow rewrite: %+v, want %s admitted", p, running)
	}
	if after := fmt.Sprint(a.Manager().GetDevices(string(running), "main")); after != before {
		t.Fatalf("a held %s, now %s", before, after)
	}
	if p := phase(st, "b"); p.Phase != podresult.PhaseRejected {
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
	st = f.waitFor(a, "marker2 admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "marker2")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	if p := phase(st, "a"); p == nil || p.UID != running {
		t.Fatalf("a right after its replacement: %+v, want %s until the replacement settles", p, running)
	}
	st = f.waitFor(a, "a replaced", func(st statusapi.NodeStatus) bool {
		p := phase(st, "a")
		return p != nil && p.UID != running && p.Phase == podresult.PhaseAdmitted
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
	f.waitFor(a, "2 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	path := filepath.Join(f.pods, "keeper.yaml")
	full := noUIDBody("keeper", "x", 1)
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	st := f.waitFor(a, "keeper admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "keeper")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	running := phase(st, "keeper").UID
	before := fmt.Sprint(a.Manager().GetDevices(string(running), "main"))
	stop()

	if err := os.WriteFile(path, []byte(validHalf(full)), 0o600); err != nil {
		t.Fatal(err)
	}
	b, logs := f.runLogged(Config{PodManifestPath: f.pods, ResyncPeriod: time.Hour})
	// A pod written after the restart is judged once the directory settles, the half with it.
	f.manifest("marker", 0)
	f.waitFor(b, "marker admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "marker")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	f.waitFor(b, "ready", func(statusapi.NodeStatus) bool { return b.ready.Load() })
	st = f.waitFor(b, "keeper restored", func(st statusapi.NodeStatus) bool {
		p := phase(st, "keeper")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
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

package manifests

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
	if got := all["uid-b"].Pod.Spec.Containers[0].Resources.Limits["example.com/gpu"]; got.Value() != 2 {
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

package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

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

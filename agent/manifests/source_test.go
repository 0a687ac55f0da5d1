package manifests

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func manifestBody(name, uid string, gpus int) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  uid: %s\nspec:\n  containers:\n  - name: main\n    image: x\n    resources:\n      limits:\n        example.com/gpu: %d\n", name, uid, gpus)
}

// testSource is a manifest source over a temp directory whose files count as settled at once
// and whose reads are counted.
type testSource struct {
	*manifestSource
	t     *testing.T
	reads int
}

func newTestSource(t *testing.T) *testSource {
	s := &testSource{manifestSource: newManifestSource(t.TempDir()), t: t}
	s.now = func() time.Time { return time.Now().Add(time.Hour) }
	s.read = func(path string, limit int64) ([]byte, os.FileInfo, error) {
		s.reads++
		return readManifestFile(path, limit)
	}
	return s
}

func (s *testSource) write(name, body string) {
	s.t.Helper()
	if err := os.WriteFile(filepath.Join(s.dir, name), []byte(body), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

// mustScan scans and returns the pods' UIDs by name and the problems' messages.
func (s *testSource) mustScan() (map[string]types.UID, []string) {
	s.t.Helper()
	pods, problems, err := s.scan()
	if err != nil {
		s.t.Fatal(err)
	}
	byName := map[string]types.UID{}
	for uid, mp := range pods {
		byName[mp.Pod.Name] = uid
	}
	var msgs []string
	for _, p := range problems {
		msgs = append(msgs, p.Error())
	}
	return byName, msgs
}

// TestManifestLastGoodVersionStays: an empty or truncated rewrite keeps the pod; the problem
// is reported once; the completed file is read again.
func TestManifestLastGoodVersionStays(t *testing.T) {
	s := newTestSource(t)
	body := manifestBody("a", "uid-a", 2)
	s.write("a.yaml", body)
	first, _, err := s.scan()
	if err != nil || first["uid-a"].Pod == nil {
		t.Fatalf("first scan: %v %v", first, err)
	}
	pods, problems := s.mustScan()
	if pods["a"] != "uid-a" || len(problems) != 0 {
		t.Fatalf("second scan: %v %v", pods, problems)
	}
	for _, partial := range []string{"", body[:20], "\n\n", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  uid: ui"} {
		s.write("a.yaml", partial)
		pods, problems = s.mustScan()
		if pods["a"] != "uid-a" {
			t.Fatalf("after writing %q pod a is gone: %v", partial, pods)
		}
		if len(problems) != 1 || !strings.Contains(problems[0], "a.yaml") {
			t.Fatalf("after writing %q: problems %v, want one naming a.yaml", partial, problems)
		}
		if _, again := s.mustScan(); len(again) != 0 {
			t.Fatalf("the same problem was reported again: %v", again)
		}
	}
	// Written back whole, the file is its last good version again: the very same pod.
	s.write("a.yaml", body)
	if again, _, _ := s.scan(); again["uid-a"].Pod != first["uid-a"].Pod {
		t.Fatalf("the restored version was parsed into a new pod")
	}
	// Cut inside the spec, the file still parses, as an invalid version of the same pod: the
	// agent keeps the admitted one (see trackManifest).
	s.write("a.yaml", body[:len(body)/2])
	all, _, err := s.scan()
	if err != nil {
		t.Fatal(err)
	}
	if mp, ok := all["uid-a"]; !ok || mp.Invalid == nil {
		t.Fatalf("half a manifest: %+v", all)
	}
	s.write("a.yaml", manifestBody("a", "uid-a2", 2))
	if pods, _ = s.mustScan(); pods["a"] != "uid-a2" {
		t.Fatalf("the file now holds uid-a2, scan says %v", pods)
	}
	if err := os.Remove(filepath.Join(s.dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	if pods, _ = s.mustScan(); len(pods) != 0 {
		t.Fatalf("the file is gone, scan still says %v", pods)
	}
}

// TestManifestReadOnlyWhenChanged: an unchanged file is not read again; a changed one is.
func TestManifestReadOnlyWhenChanged(t *testing.T) {
	s := newTestSource(t)
	s.write("a.yaml", manifestBody("a", "uid-a", 1))
	s.write("bad.yaml", "kind: Pod\nmetadata: [\n")
	_, problems := s.mustScan()
	if s.reads != 2 || len(problems) != 1 {
		t.Fatalf("first scan: %d reads, problems %v", s.reads, problems)
	}
	for i := 0; i < 5; i++ {
		if _, problems := s.mustScan(); len(problems) != 0 {
			t.Fatalf("rescan reported %v", problems)
		}
	}
	if s.reads != 2 {
		t.Fatalf("unchanged files were read %d times in all, want 2", s.reads)
	}
	s.write("a.yaml", manifestBody("a", "uid-a", 1)+"\n")
	if pods, _ := s.mustScan(); s.reads != 3 || pods["a"] != "uid-a" {
		t.Fatalf("after a change: %d reads, pods %v", s.reads, pods)
	}

	// A file modified just now (past manifestDebounce, well within manifestSettle) is read
	// again on the next scan, but its unchanged content is neither parsed nor reported again.
	s.now = func() time.Time { return time.Now().Add(manifestDebounce) }
	s.write("bad.yaml", "kind: Pod\nmetadata: [[\n")
	if _, problems := s.mustScan(); len(problems) != 1 {
		t.Fatalf("new bad content: problems %v", problems)
	}
	if _, problems := s.mustScan(); len(problems) != 0 {
		t.Fatalf("unsettled bad file reported again: %v", problems)
	}
}

// TestManifestNonRegularFilesAreSkipped: a FIFO, a symlink to /dev/zero, a socket and a
// directory are skipped with one report each, never read, and never block the scan.
func TestManifestNonRegularFilesAreSkipped(t *testing.T) {
	s := newTestSource(t)
	if err := syscall.Mkfifo(filepath.Join(s.dir, "fifo.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(s.dir, "zero.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(s.dir, "dir.yaml"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A socket path must be short; the directory of a temp socket name.
	sock := filepath.Join(s.dir, "s.yaml")
	if len(sock) < 100 {
		lis, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lis.Close() }()
	}
	s.write("ok.yaml", manifestBody("ok", "uid-ok", 1))
	if err := os.Symlink("ok.yaml", filepath.Join(s.dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var pods map[string]types.UID
	var problems []string
	go func() {
		defer close(done)
		pods, problems = s.mustScan()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("scan blocked")
	}
	if pods["ok"] != "uid-ok" || len(pods) != 1 {
		t.Fatalf("pods %v", pods)
	}
	if s.reads != 2 { // ok.yaml and the symlink to it
		t.Fatalf("%d files read, want 2", s.reads)
	}
	joined := strings.Join(problems, "\n")
	for _, want := range []string{"fifo.yaml is not a regular file (a named pipe)", "zero.yaml is not a regular file (a character device)",
		"dir.yaml is not a regular file (a directory)", "same pod UID uid-ok"} {
		if !strings.Contains(joined, want) {
			t.Errorf("problems do not say %q:\n%s", want, joined)
		}
	}
	if _, again := s.mustScan(); len(again) != 0 {
		t.Fatalf("reported again: %v", again)
	}
}

// TestReadManifestFileRefusesWhatStatMissed: the opener itself refuses a FIFO (as if swapped in
// after the stat) without blocking, a device, and a file over the limit.
func TestReadManifestFileRefusesWhatStatMissed(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, 11<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{fifo: "not a regular file", "/dev/zero": "not a regular file",
		big: fmt.Sprintf("%d bytes, more than the %d allowed", 11<<20, MaxFileSize)} {
		done := make(chan error, 1)
		go func() {
			_, _, err := readManifestFile(path, MaxFileSize)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want %q", path, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("reading %s blocked", path)
		}
	}
	if _, _, err := readManifestFile(filepath.Join(dir, "missing"), 10); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestManifestTooLargeKeepsLastGood: an 11 MiB rewrite is skipped with a message naming the
// limit, once, and the pod of the last good version stays.
func TestManifestTooLargeKeepsLastGood(t *testing.T) {
	s := newTestSource(t)
	body := manifestBody("a", "uid-a", 1)
	s.write("a.yaml", body)
	s.mustScan()
	s.write("a.yaml", body+"#"+strings.Repeat("x", 11<<20)+"\n")
	pods, problems := s.mustScan()
	if pods["a"] != "uid-a" || len(problems) != 1 || !strings.Contains(problems[0], "more than the 10485760 allowed") {
		t.Fatalf("pods %v problems %v", pods, problems)
	}
	reads := s.reads
	if _, again := s.mustScan(); len(again) != 0 || s.reads != reads {
		t.Fatalf("the big file was read or reported again: %v", again)
	}
}

// TestManifestInvalidPodsAreKeyed: an invalid pod is returned with its reason; one whose UID
// cannot key it gets a key derived from its file, stable across scans.
func TestManifestInvalidPodsAreKeyed(t *testing.T) {
	s := newTestSource(t)
	s.write("half.yaml", strings.Replace(manifestBody("half", "uid-half", 1), "gpu: 1", "gpu: 0.5", 1))
	s.write("trav.yaml", manifestBody("trav", `"/../../x"`, 1))
	pods, _, err := s.scan()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Pod{}
	for uid, mp := range pods {
		if uid != mp.Pod.UID {
			t.Fatalf("pod keyed %s has UID %s", uid, mp.Pod.UID)
		}
		byName[mp.Pod.Name] = mp
	}
	if mp := byName["half"]; mp.Invalid == nil || mp.Pod.UID != "uid-half" || !strings.Contains(mp.Invalid.Error(), "example.com/gpu") {
		t.Fatalf("half: %+v", mp)
	}
	trav := byName["trav"]
	if trav.Invalid == nil || !strings.HasPrefix(string(trav.Pod.UID), "invalid-") || checkUID(string(trav.Pod.UID)) != "" {
		t.Fatalf("trav: uid %q invalid %v", trav.Pod.UID, trav.Invalid)
	}
	again, _, _ := s.scan()
	if _, ok := again[trav.Pod.UID]; !ok {
		t.Fatalf("derived key changed between scans")
	}
}

// TestManifestDuplicateUIDKeepsOwner: a second file with a tracked pod's UID does not take it
// over, whatever its name.
func TestManifestDuplicateUIDKeepsOwner(t *testing.T) {
	s := newTestSource(t)
	s.write("m.yaml", manifestBody("a", "uid-a", 1))
	s.mustScan()
	s.write("0.yaml", manifestBody("impostor", "uid-a", 8))
	pods, problems := s.mustScan()
	if pods["a"] != "uid-a" || len(pods) != 1 || len(problems) != 1 || !strings.Contains(problems[0], "0.yaml: same pod UID uid-a") {
		t.Fatalf("pods %v problems %v", pods, problems)
	}
}

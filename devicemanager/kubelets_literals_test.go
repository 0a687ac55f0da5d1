package devicemanager

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// minorVersion matches a kubelet minor of the 1.3x series as a version, "1.36" or "v1.37.2",
// and not inside a longer number.
var minorVersion = regexp.MustCompile(`(^|[^0-9.])v?1\.3[0-9]([^0-9]|$)`)

// goLiteral matches a Go interpreted or raw string literal (or a quoted word in a comment).
var goLiteral = regexp.MustCompile("\"(?:[^\"\\\\\n]|\\\\.)*\"|`[^`]*`")

// literalScanExempt reports whether a tracked file may name a kubelet minor, and why:
//   - devicemanager/kubelets.go is the table itself;
//   - test/kubebins and the per-minor modules of test/upstreambench (test/upstreambench/kubelet-*)
//     pin an upstream release in order to build its code: naming it is their job;
//   - go.mod and go.sum record module versions (k8s.io/kubernetes, and unrelated modules whose
//     own versions happen to read 1.3x);
//   - testdata holds recorded outcomes and goldens, which quote the policy each was recorded under;
//   - Markdown is prose that explains what each minor changed;
//   - a _test.go file asserts one minor's behaviour by its name: it stays true when another
//     minor is added, so it is no cost of adding one. A test that enumerates every minor must
//     derive the list from the table (TestValidPoliciesListsEveryRow, TestKubeletVersions).
func literalScanExempt(path string) bool {
	base := filepath.Base(path)
	switch {
	case path == "devicemanager/kubelets.go",
		strings.HasPrefix(path, "test/kubebins/"),
		strings.HasPrefix(path, "test/upstreambench/kubelet-"),
		base == "go.mod", base == "go.sum",
		strings.HasPrefix(path, "testdata/"), strings.Contains(path, "/testdata/"),
		strings.HasSuffix(path, ".md"),
		strings.HasSuffix(path, "_test.go"):
		return true
	}
	return false
}

// TestNoVersionLiteralOutsideTable: no tracked file outside the exemptions of
// literalScanExempt names a kubelet minor. In Go source a string literal (or a quoted word
// in a comment) may not; in any other file (Makefile, CI script, web assets) no line may.
// Everything else derives the minors from kubeletVersions, so adding one is a row there and
// the upstream modules.
func TestNoVersionLiteralOutsideTable(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is needed to list the tracked files: %v", err)
	}
	cmd := exec.Command(git, "ls-files", "-z")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files in the repository root: %v", err)
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) < 100 {
		t.Fatalf("git ls-files listed %d files; is .. the repository root?", len(files))
	}
	var scanned int
	for _, path := range files {
		if path == "" || literalScanExempt(path) {
			continue
		}
		data, err := os.ReadFile(filepath.Join("..", path))
		if err != nil {
			if os.IsNotExist(err) { // deleted in the work tree, not yet committed
				continue
			}
			t.Fatal(err)
		}
		if bytes.IndexByte(data, 0) >= 0 { // binary
			continue
		}
		scanned++
		for _, hit := range minorLiterals(path, string(data)) {
			t.Errorf("%s names a kubelet minor: %s (derive it from devicemanager.KubeletVersions)", path, hit)
		}
	}
	if scanned == 0 {
		t.Fatal("no file scanned")
	}
}

// minorLiterals returns "line N: text" for each place in a file that names a kubelet minor
// as TestNoVersionLiteralOutsideTable forbids.
func minorLiterals(path, text string) []string {
	var hits []string
	for i, line := range strings.Split(text, "\n") {
		candidates := []string{line}
		if strings.HasSuffix(path, ".go") {
			candidates = goLiteral.FindAllString(line, -1)
		}
		for _, c := range candidates {
			if minorVersion.MatchString(c) {
				hits = append(hits, "line "+strconv.Itoa(i+1)+": "+strings.TrimSpace(c))
			}
		}
	}
	return hits
}

// TestMinorLiterals: the scan finds a minor in a Go string literal and on any line of another
// file, and not in Go prose, other numbers or longer versions.
func TestMinorLiterals(t *testing.T) {
	for _, tc := range []struct {
		path, text string
		hits       int
	}{
		{"a.go", `var v = "v1.37.2-kdm"`, 1},
		{"a.go", "p := `kubelet-1.35`", 1},
		{"a.go", `// the kubelet v1.36 replaces it`, 0},
		{"a.go", `x := "1.3" + "11.36" + "v1.360" + "protobuf 0.1.36"`, 0},
		{"a.go", `// kubelet version such as "kubelet-1.36"`, 1},
		{"Makefile", "POLICIES ?= kubelet-1.36 kdm", 1},
		{".ci/run", "for mod in . test/x; do", 0},
	} {
		if got := len(minorLiterals(tc.path, tc.text)); got != tc.hits {
			t.Errorf("%s %q: %d hits, want %d", tc.path, tc.text, got, tc.hits)
		}
	}
}

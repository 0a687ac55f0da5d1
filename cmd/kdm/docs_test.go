package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

// repoRoot is the repository, seen from cmd/kdm.
const repoRoot = "../.."

var (
	// mdLink matches a Markdown link or image target: [text](target) or ![alt](target).
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// docCitation matches a citation of the project's docs in code, scripts or prose:
	// docs/behaviour.md or docs/behaviour.md#a-section.
	docCitation = regexp.MustCompile(`docs/[A-Za-z0-9_-]+\.md(#[A-Za-z0-9_-]+)?`)
	// codePath matches a back-quoted repository path such as `devicemanager/allocate.go`.
	codePath = regexp.MustCompile("`([a-z0-9_]+(?:/[A-Za-z0-9_.-]+)+\\.(?:go|md|txt|yaml|json))`")
	// heading matches a Markdown heading line.
	heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
)

// slug is the anchor GitHub gives a heading: lower case, punctuation other than '-' and '_'
// dropped, spaces turned into '-'.
func slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the heading anchors of a Markdown file, numbered as GitHub numbers repeats.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			s := slug(m[1])
			if n := seen[s]; n > 0 {
				out[s+"-"+itoa(n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
	}
	return out
}

// checkTarget reports what is wrong with a reference to target (a path relative to dir, with an
// optional #anchor), if anything.
func checkTarget(t *testing.T, dir, target string) string {
	t.Helper()
	path, frag, _ := strings.Cut(target, "#")
	file := filepath.Join(dir, path)
	if path == "" {
		return "" // a same-file anchor; checked by the caller
	}
	rel, err := filepath.Rel(repoRoot, file)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "points outside the repository"
	}
	if _, err := os.Stat(file); err != nil {
		return "no such file or directory: " + rel
	}
	if frag != "" && strings.HasSuffix(path, ".md") && !anchors(t, file)[frag] {
		return "no heading with anchor #" + frag + " in " + rel
	}
	return ""
}

// TestDocsLinksResolve: every relative link of README.md and docs/*.md names a file of the
// repository (and, for a Markdown file, a heading that exists); every back-quoted repository path
// in docs/ exists; and no project file cites a document outside the repository ("spec §…").
func TestDocsLinksResolve(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(docs) < 5 {
		t.Fatalf("docs/*.md: %v, %d files", err, len(docs))
	}
	for _, md := range append([]string{filepath.Join(repoRoot, "README.md")}, docs...) {
		data, err := os.ReadFile(md)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(repoRoot, md)
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if frag, ok := strings.CutPrefix(target, "#"); ok {
				if !anchors(t, md)[frag] {
					t.Errorf("%s: link %s: no heading with that anchor", name, target)
				}
				continue
			}
			if problem := checkTarget(t, filepath.Dir(md), target); problem != "" {
				t.Errorf("%s: link %s: %s", name, target, problem)
			}
		}
		if filepath.Base(filepath.Dir(md)) != "docs" {
			continue
		}
		top := topLevelDirs(t)
		for _, m := range codePath.FindAllStringSubmatch(string(data), -1) {
			first, _, _ := strings.Cut(m[1], "/")
			if !top[first] {
				continue // an upstream path such as plugin/v1beta1/server.go
			}
			if _, err := os.Stat(filepath.Join(repoRoot, m[1])); err != nil {
				t.Errorf("%s: `%s` is not a file of the repository", name, m[1])
			}
		}
	}

	// Citations of docs/ anywhere in the project resolve; nothing cites the old spec.
	err = filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != repoRoot && (strings.HasPrefix(n, ".") || n == "bin" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".txt":
		default:
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if rel == filepath.Join("cmd", "kdm", "docs_test.go") {
			return nil // this file names the patterns it looks for
		}
		text := string(data)
		if strings.Contains(text, "§") || regexp.MustCompile(`\bspec/[a-z0-9.-]+\.md`).MatchString(text) {
			t.Errorf("%s cites a document outside the repository (\"§\" or spec/*.md); cite docs/ instead", rel)
		}
		for _, c := range docCitation.FindAllString(text, -1) {
			if problem := checkTarget(t, repoRoot, c); problem != "" {
				t.Errorf("%s: citation %s: %s", rel, c, problem)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// topLevelDirs lists the repository's top-level directories.
func topLevelDirs(t *testing.T) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			out[e.Name()] = true
		}
	}
	return out
}

// TestSlug pins the anchor rule the link check relies on.
func TestSlug(t *testing.T) {
	for title, want := range map[string]string{
		"Capacity, allocatable and the grace period":    "capacity-allocatable-and-the-grace-period",
		"Behaviour: the kubelet's, with its bugs fixed": "behaviour-the-kubelets-with-its-bugs-fixed",
		"`kdm inspect` and --wide":                      "kdm-inspect-and---wide",
	} {
		if got := slug(title); got != want {
			t.Errorf("slug(%q) = %q, want %q", title, got, want)
		}
	}
}

// readmeFlagsStart and readmeFlagsEnd delimit the table of `kdm run`'s flags in README.md.
const (
	readmeFlagsStart = "<!-- kdm run flags: generated by TestReadmeRunFlags -->\n"
	readmeFlagsEnd   = "<!-- end of kdm run flags -->\n"
)

// runFlagsTable renders `kdm run`'s flag set as the README's Markdown table.
func runFlagsTable() string {
	fs, _ := newRunFlags(io.Discard)
	var b strings.Builder
	b.WriteString("| flag | default | what |\n|---|---|---|\n")
	escape := strings.NewReplacer("|", `\|`, "<", `\<`)
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name := "`--" + f.Name + "`"
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		def := "`" + f.DefValue + "`"
		if f.DefValue == "" || f.DefValue == "[]" {
			def = "—"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, def, escape.Replace(f.Usage))
	})
	return b.String()
}

// TestReadmeRunFlags: README.md's table of `kdm run` flags is the real flag set, every flag
// but the hidden ones with its default and help text. KDM_UPDATE_README=1 rewrites the table.
func TestReadmeRunFlags(t *testing.T) {
	path := filepath.Join(repoRoot, "README.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	before, rest, ok := strings.Cut(text, readmeFlagsStart)
	table, after, ok2 := strings.Cut(rest, readmeFlagsEnd)
	if !ok || !ok2 {
		t.Fatalf("README.md has no table of kdm run's flags between %q and %q", readmeFlagsStart, readmeFlagsEnd)
	}
	want := runFlagsTable()
	if table == want {
		return
	}
	if os.Getenv("KDM_UPDATE_README") != "" {
		if err := os.WriteFile(path, []byte(before+readmeFlagsStart+want+readmeFlagsEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("README.md: table of kdm run's flags rewritten")
		return
	}
	t.Errorf("README.md's table of kdm run's flags differs from the flag set (KDM_UPDATE_README=1 go test -run TestReadmeRunFlags ./cmd/kdm/ rewrites it):\n%s",
		cmp.Diff(want, table))
}

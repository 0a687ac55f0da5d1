package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuild builds a small command and runs it.
func TestBuild(t *testing.T) {
	dir, err := Build("testbin-ok", map[string]string{"hello": "./testdata/hello"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if !strings.HasPrefix(filepath.Base(dir), "testbin-ok") {
		t.Errorf("directory %s does not start with the prefix", dir)
	}
	out, err := exec.Command(filepath.Join(dir, "hello")).Output()
	if err != nil || strings.TrimSpace(string(out)) != "hello from testbin" {
		t.Fatalf("running the built binary: %q, %v", out, err)
	}
}

// TestBuildFailure checks that a package that does not build is named in the error and that
// no directory is left behind.
func TestBuildFailure(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dir, err := Build("testbin-bad", map[string]string{"hello": "./testdata/hello", "missing": "./testdata/missing"})
	if err == nil {
		_ = os.RemoveAll(dir)
		t.Fatal("Build of a missing package succeeded")
	}
	if !strings.Contains(err.Error(), "building missing from ./testdata/missing") {
		t.Errorf("error %q does not name the binary and its package", err)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "testbin-bad*")); len(left) != 0 {
		t.Errorf("Build left %v behind", left)
	}
}

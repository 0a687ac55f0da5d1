package main

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestPackagesAndLines: the package arguments are told from flags and their values, and only
// package paths of go build -v's output are counted.
func TestPackagesAndLines(t *testing.T) {
	got := packages([]string{"-ldflags", "-X main.version=1 -s", "-o", "bin/", "-trimpath", "./cmd/kdm", "./cmd/kdm-nvml-plugin"})
	if want := []string{"./cmd/kdm", "./cmd/kdm-nvml-plugin"}; !slices.Equal(got, want) {
		t.Errorf("packages = %q, want %q", got, want)
	}
	for l, want := range map[string]bool{
		"k8s.io/api/core/v1":                   true,
		"# github.com/NVIDIA/go-nvml/pkg/nvml": false,
		"./x.go:3:2: undefined: y":             false,
		"":                                     false,
	} {
		if isPackagePath(l) != want {
			t.Errorf("isPackagePath(%q) = %v, want %v", l, !want, want)
		}
	}
}

// TestRunCountsAndPassesErrors: a real build of this package reports its total and ends with
// a summary line; a failing build exits non-zero with the compiler's error passed through.
func TestRunCountsAndPassesErrors(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed: %v", err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{goBin, "build", "-o", t.TempDir() + "/bp", "."}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	if s := out.String(); !strings.Contains(s, "packages with their dependencies") || !(strings.Contains(s, "up to date") || strings.Contains(s, "built: ")) {
		t.Errorf("output lacks the total or the summary:\n%s", s)
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{goBin, "build", "-o", t.TempDir() + "/x", "./no/such/package"}, &out, &errOut); code == 0 {
		t.Errorf("a failing build exited 0; stderr:\n%s", errOut.String())
	}
	if !strings.Contains(errOut.String(), "no/such/package") {
		t.Errorf("the build's error was not passed through:\n%s", errOut.String())
	}
}

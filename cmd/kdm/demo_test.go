package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBuiltinSamplesMatchTestdata: the demo's embedded samples are exactly testdata/pods, the
// source of truth: same files, same bytes.
func TestBuiltinSamplesMatchTestdata(t *testing.T) {
	want, err := filepath.Glob("../../testdata/pods/*.yaml")
	if err != nil || len(want) == 0 {
		t.Fatalf("no testdata/pods/*.yaml: %v", err)
	}
	got, err := loadSamples("")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d built-in samples, %d in testdata/pods: copy testdata/pods/*.yaml to cmd/kdm/samples/", len(got), len(want))
	}
	for i, path := range want {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got[i].name != filepath.Base(path) || !bytes.Equal(got[i].data, data) {
			t.Errorf("cmd/kdm/samples/%s differs from %s: copy testdata/pods/*.yaml to cmd/kdm/samples/", got[i].name, path)
		}
	}
	if _, err := loadSamples(t.TempDir()); err == nil || !strings.Contains(err.Error(), "need at least two") {
		t.Errorf("an empty --pods directory: %v", err)
	}
}

// TestDemoFromAnyDirectory builds the kdm binary and runs `kdm demo` from an empty directory
// outside the repository: it must find its sample pods (embedded) and finish the tour.
func TestDemoFromAnyDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; run by make test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "kdm")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, "demo", "--timeout", "45s")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kdm demo from %s: %v\n%s", cmd.Dir, err, out)
	}
	for _, want := range []string{"Placed 2 pod manifests", "Added one more pod: training.yaml", "No GPU is held by two pods"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

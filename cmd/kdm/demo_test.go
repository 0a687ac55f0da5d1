package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kdm-project/kdm/devicemanager"
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
// outside the repository: it must find its sample pods (embedded) and finish the tour, showing
// each pod's GPUs by what tells them apart.
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
	// The policy is named in the first lines, before anything happens.
	if head := strings.Join(strings.SplitN(string(out), "\n", 4)[:3], "\n"); !strings.Contains(head, "Policy: "+devicemanager.KDMPolicyName+" (") {
		t.Errorf("the demo's first lines do not name its policy:\n%s", head)
	}
	for _, want := range []string{"Placed 2 pod manifests", "Added one more pod: training.yaml", "No GPU is held by two pods",
		"The GPUs' IDs all begin GPU-a100a100-0000-4000-8000-00000000000; below, ~ stands for it"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	// Each GPU a pod sees is told apart by what its ID does not share with the others (issue
	// 33): "~3", never a cut such as "GPU-a100a100-0000-400…" or the last four digits "…0003".
	visible := regexp.MustCompile(`NVIDIA_VISIBLE_DEVICES=(\S+)`).FindAllSubmatch(out, -1)
	if len(visible) == 0 {
		t.Fatalf("demo output shows no pod's GPUs:\n%s", out)
	}
	for _, m := range visible {
		if !regexp.MustCompile(`^~[0-7](,~[0-7])*$`).Match(m[1]) {
			t.Errorf("a pod's GPUs print as %s, want ~N for each:\n%s", m[1], out)
		}
	}
}

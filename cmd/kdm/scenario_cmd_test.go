package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScenarioCommand(t *testing.T) {
	script := "../../testdata/scenarios/node-reboot.txt"
	var out, errOut bytes.Buffer
	if code := run([]string{"scenario", "--policy", "kdm", script}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "p1 admitted after waiting for its device plugin") {
		t.Fatalf("kdm timeline lacks the deferred admission:\n%s", out.String())
	}
	out.Reset()
	svg := filepath.Join(t.TempDir(), "reboot.svg")
	if code := run([]string{"scenario", "--compare", "--svg", svg, script}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "| p1 waiting for its device plugin") {
		t.Fatalf("compare view does not mark the difference:\n%s", out.String())
	}
	b, err := os.ReadFile(svg)
	if err != nil || !bytes.HasPrefix(b, []byte("<svg")) {
		t.Fatalf("SVG not written: %v", err)
	}
	if code := run([]string{"scenario", "--policy", "nope", script}, &out, &errOut); code != 1 {
		t.Fatalf("unknown policy: exit %d", code)
	}
}

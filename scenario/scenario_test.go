package scenario

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestScenarios replays every script under testdata/scenarios with both policies in lockstep
// and compares each command's outcome with the script's recorded timeline (-rewrite refreshes
// it). A command that fails, or a device held by two containers, fails the script.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "../testdata/scenarios", func(t *testing.T, path string) {
		dir := filepath.Dir(path)
		kubelet, err := New(Config{Policy: "kubelet-1.36", ScriptDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer kubelet.Close()
		kdm, err := New(Config{Policy: "kdm", ScriptDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer kdm.Close()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			args := strings.Fields(d.Input)
			if len(d.CmdArgs) > 0 || len(args) == 0 {
				var parts []string
				for _, a := range d.CmdArgs {
					parts = append(parts, a.String())
				}
				args = parts
			}
			a, errA := kubelet.Do(d.Cmd, args)
			b, errB := kdm.Do(d.Cmd, args)
			if errA != nil {
				t.Fatalf("%s: kubelet-1.36: %v", d.Pos, errA)
			}
			if errB != nil {
				t.Fatalf("%s: kdm: %v", d.Pos, errB)
			}
			return combined(a, b) + "\n"
		})
	})
}

// TestRunFileAndRender runs one script through the CLI path and renders both views.
func TestRunFileAndRender(t *testing.T) {
	path := "../testdata/scenarios/node-reboot.txt"
	a, err := RunFile(path, "kubelet-1.36")
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunFile(path, "kdm")
	if err != nil {
		t.Fatal(err)
	}
	cmp := FormatCompare(a, b)
	if !strings.Contains(cmp, "rejected") || !strings.Contains(cmp, "admitted after waiting") {
		t.Fatalf("compare view lacks the story:\n%s", cmp)
	}
	var svg bytes.Buffer
	if err := RenderSVG(&svg, a, b); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(svg.String(), "<svg") || !strings.Contains(svg.String(), "example.com/gpu") || !strings.Contains(svg.String(), "#cf222e") {
		t.Fatalf("SVG lacks lanes or markers")
	}
}

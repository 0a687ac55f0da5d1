package scenario

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestScenarios replays every script under testdata/scenarios with every policy (Policies:
// each supported kubelet, then kdm) in lockstep and compares each command's outcome with the
// script's recorded timeline (-rewrite refreshes it). A command that fails, or a device held
// by two containers, fails the script.
func TestScenarios(t *testing.T) {
	policies := Policies()
	datadriven.Walk(t, "../testdata/scenarios", func(t *testing.T, path string) {
		dir := filepath.Dir(path)
		runners := make([]*Runner, len(policies))
		for i, p := range policies {
			r, err := New(Config{Policy: p, ScriptDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			runners[i] = r
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			args := strings.Fields(d.Input)
			if len(d.CmdArgs) > 0 || len(args) == 0 {
				var parts []string
				for _, a := range d.CmdArgs {
					parts = append(parts, a.String())
				}
				args = parts
			}
			steps := make([]Step, len(runners))
			for i, r := range runners {
				st, err := r.Do(d.Cmd, args)
				if err != nil {
					t.Fatalf("%s: %s: %v", d.Pos, policies[i], err)
				}
				steps[i] = st
			}
			return combined(policies, steps) + "\n"
		})
	})
}

// TestRunFileAndRender runs one script through the CLI path under every policy and renders
// both views: the side-by-side text has a column per policy and keeps the whole rejection
// reason, and the SVG a lane per policy.
func TestRunFileAndRender(t *testing.T) {
	path := "../testdata/scenarios/node-reboot.txt"
	tls, err := RunFiles(path, Policies())
	if err != nil {
		t.Fatal(err)
	}
	cmp := FormatCompare(0, tls...)
	// A column per policy; a width that wraps nothing keeps the phrases whole.
	wide := FormatCompare(1000, tls...)
	for _, want := range append(Policies(), "admitted after waiting", "(deferred admission)") {
		if !strings.Contains(wide, want) {
			t.Errorf("compare view lacks %q:\n%s", want, wide)
		}
	}
	// Wrapped, not cut: the reason reads whole once the column's line breaks are undone.
	if flat := firstColumn(cmp); !strings.Contains(flat, "no healthy devices present; cannot allocate unhealthy devices example.com/gpu, which is unexpected") {
		t.Errorf("compare view cuts the rejection reason:\n%s", cmp)
	}
	var svg bytes.Buffer
	if err := RenderSVG(&svg, tls...); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "example.com/gpu", "#cf222e", ">kubelet-1.37<"} {
		if !strings.Contains(svg.String(), want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

// firstColumn returns the text of the first column of a side-by-side view, its rows joined by
// single spaces, so that a wrapped line reads whole again.
func firstColumn(view string) string {
	var cells []string
	for _, l := range strings.Split(view, "\n") {
		if left, _, ok := strings.Cut(l, " | "); ok {
			cells = append(cells, strings.Fields(left)...)
		}
	}
	return strings.Join(cells, " ")
}

// TestRunFilesKeepsOthersWhenOneFails: a policy whose run fails is named in the error, and the
// timelines of the others are returned whole, the failed one padded to the same commands.
func TestRunFilesKeepsOthersWhenOneFails(t *testing.T) {
	path := "../testdata/scenarios/grace-expiry.txt"
	good := Policies()[len(Policies())-1]
	tls, err := RunFiles(path, []string{"no-such-policy", good})
	if err == nil || !strings.Contains(err.Error(), "policy no-such-policy failed") {
		t.Fatalf("error %v, want one naming the failed policy", err)
	}
	if len(tls) != 2 || tls[1].Policy != good || len(tls[0].Steps) != len(tls[1].Steps) {
		t.Fatalf("want both timelines with the same commands, got %d", len(tls))
	}
	cmp := FormatCompare(0, tls...)
	for _, want := range []string{"not run under no-such-policy", good, "removed"} {
		if !strings.Contains(cmp, want) {
			t.Errorf("compare view lacks %q:\n%s", want, cmp)
		}
	}
}

// TestRollingUpdateBesideAnotherInstance: a rolling update while an added instance keeps
// running waits only for the instance that exits (the other's stream stays open).
func TestRollingUpdateBesideAnotherInstance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "script.txt")
	script := "kubelet start\n----\n\nplugin start gpu devices=4\n----\n\nplugin add-instance gpu\n----\n\nplugin rolling-update gpu\n----\n"
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, policy := range Policies() {
		if _, err := RunFile(path, policy); err != nil {
			t.Errorf("%s: %v", policy, err)
		}
	}
}

// TestHealthChangeNobodyServes: a device's health changes on a plugin whose instances all run
// unserved (the kubelet 1.36 serves none after the served one exits). The step reports that
// the manager does not see it instead of waiting for a count that cannot come; under the
// policies that hand the resource to a remaining instance, the change is seen and counted.
func TestHealthChangeNobodyServes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "script.txt")
	script := "kubelet start\n----\n\nplugin start gpu devices=4\n----\n\nplugin add-instance gpu\n----\n\n" +
		"plugin rolling-update gpu\n----\n\nplugin stop-instance gpu gpu-3.sock\n----\n\ndevice unhealthy gpu gpu-0\n----\n"
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, policy := range Policies() {
		tl, err := RunFile(path, policy)
		if err != nil {
			t.Errorf("%s: %v", policy, err)
			continue
		}
		last := tl.Steps[len(tl.Steps)-1]
		unseen := strings.Contains(strings.Join(last.Lines, "\n"), "the manager does not see it")
		served := strings.Contains(strings.Join(tl.Steps[len(tl.Steps)-2].Lines, "\n"), "serves example.com/gpu (")
		if unseen == served {
			t.Errorf("%s: a remaining instance serves the resource: %v; the health change reported unseen: %v\n%s",
				policy, served, unseen, strings.Join(last.Lines, "\n"))
		}
		if c := last.Counts["example.com/gpu"]; served && c[1] != 3 {
			t.Errorf("%s: allocatable %d after gpu-0 went unhealthy, want 3", policy, c[1])
		}
	}
}

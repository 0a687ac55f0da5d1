package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/scenario"
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
	// Wide enough for a column per policy to keep the kdm line whole, however many minors.
	if code := run([]string{"scenario", "--compare", "--width", "400", "--svg", svg, script}, &out, &errOut); code != 0 {
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

// TestScenarioCompareOnce: --compare prints the story once, on stdout, with a column headed
// by each policy devicemanager lists; stderr stays empty. A rejection's reason is wrapped,
// not cut, and `kubelet start` is not reported as kdm's start in a kubelet's column.
func TestScenarioCompareOnce(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"scenario", "--compare", "--width", "100", "../../testdata/scenarios/node-reboot.txt"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if errOut.Len() != 0 {
		t.Errorf("--compare wrote to stderr too:\n%s", errOut.String())
	}
	got := out.String()
	if n := strings.Count(got, "$ node reboot"); n != 1 {
		t.Errorf("the story is printed %d times, want once:\n%s", n, got)
	}
	header := ""
	for _, l := range strings.Split(got, "\n") {
		if strings.Contains(l, "|") && strings.Contains(l, devicemanager.KDMPolicyName) && !strings.Contains(l, "p1") {
			header = l
			break
		}
	}
	for _, p := range devicemanager.PolicyNames() {
		if !strings.Contains(header, p) {
			t.Errorf("the columns' header %q lacks the policy %s", header, p)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if len([]rune(l)) > 100 {
			t.Errorf("line wider than --width 100: %q", l)
		}
		if strings.Contains(l, "…") {
			t.Errorf("line cut: %q", l)
		}
	}
	if strings.Contains(got, "kdm started") {
		t.Errorf("kubelet start reported as kdm's start:\n%s", got)
	}
	if flat := firstColumn(got); !strings.Contains(flat, "no healthy devices present; cannot allocate unhealthy devices example.com/gpu, which is unexpected") {
		t.Errorf("the rejection reason is cut:\n%s", got)
	}
}

// TestScenarioUsage: --policy's help names every policy devicemanager lists and the default;
// --policy with --compare is refused as bad usage.
func TestScenarioUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"scenario", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	help := strings.Join(strings.Fields(out.String()), " ")
	for _, p := range append(devicemanager.PolicyNames(), devicemanager.KubeletAlias, "default is "+scenario.DefaultPolicy) {
		if !strings.Contains(help, p) {
			t.Errorf("help lacks %q:\n%s", p, out.String())
		}
	}
	errOut.Reset()
	if code := run([]string{"scenario", "--compare", "--policy", "kdm", "x.txt"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "--policy goes without them") {
		t.Fatalf("--compare with --policy: exit %d, %s", code, errOut.String())
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

// TestExploreCommand: kdm explore takes every policy devicemanager lists, kubelet-1.37
// included, and names them in --help; a random exploration reports no state count (only an
// exhaustive walk counts states), an exhaustive one reports its distinct states.
func TestExploreCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"explore", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, p := range devicemanager.PolicyNames() {
		if !strings.Contains(out.String(), p) {
			t.Errorf("explore --help lacks the policy %s:\n%s", p, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"explore", "--policy", "kubelet-1.37", "--seeds", "20"}, &out, &errOut); code != 0 && code != 1 {
		t.Fatalf("explore --policy kubelet-1.37: exit %d: %s", code, errOut.String())
	}
	if got := errOut.String(); !strings.Contains(got, "explore: kubelet-1.37: 20 runs, ") || strings.Contains(got, "states") {
		t.Errorf("random exploration's summary: %q, want the policy and runs, no state count", got)
	}
	errOut.Reset()
	story := "../../testdata/scenarios/register-twice-same-socket.txt"
	if code := run([]string{"explore", "--policy", "kubelet-1.37", "--story", story, "--exhaustive"}, &out, &errOut); code != 0 {
		t.Fatalf("exhaustive kubelet-1.37 walk of %s: exit %d: %s", story, code, errOut.String())
	}
	if got := errOut.String(); !strings.Contains(got, "distinct states") || !strings.Contains(got, "0 violations") {
		t.Errorf("exhaustive walk's summary: %q, want its distinct states and 0 violations", got)
	}
}

// TestExploreBadFlagsNamed: a bad --policy, --seeds or --steps exits 2 naming the flag, once
// prefixed by the command ("kdm explore: --policy: ...", not "kdm explore: explore: Policy: ...").
func TestExploreBadFlagsNamed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explore", "--policy", "kubelet-9.99"}, "kdm explore: --policy: "},
		{[]string{"explore", "--seeds", "-1"}, "kdm explore: --seeds must not be negative, got -1"},
		{[]string{"explore", "--steps", "-5"}, "kdm explore: --steps must not be negative, got -5"},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut)
		if got := errOut.String(); code != 2 || !strings.HasPrefix(got, tc.want) || strings.Contains(got, "explore: explore") {
			t.Errorf("kdm %s: exit %d, stderr %q; want exit 2 and stderr starting %q", strings.Join(tc.args[1:], " "), code, got, tc.want)
		}
	}
}

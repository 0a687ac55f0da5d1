package explore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/scenario"
)

const (
	issue125579 = "kubernetes #125579"
	issue138446 = "kubernetes #138446"
	issue117955 = "kubernetes #117955"
)

func findingWith(rep *Report, substr string) *Finding {
	for _, f := range rep.Findings {
		if strings.Contains(f.Class, substr) {
			return f
		}
	}
	return nil
}

// TestKubeletPolicyFindsKnownFailures: random runs under the kubelet's policy find, by
// themselves, the kubelet's restart failures, and print each as a script that the scenario
// runner replays against the real manager: the pod is rejected under kubelet-1.36, not under
// kdm.
func TestKubeletPolicyFindsKnownFailures(t *testing.T) {
	rep, err := Random(Config{Policy: "kubelet-1.36", Seeds: 500})
	if err != nil {
		t.Fatal(err)
	}
	for _, issue := range []string{issue125579, issue138446} {
		f := findingWith(rep, issue)
		if f == nil {
			t.Fatalf("500 seeds did not find %s; findings: %v", issue, classes(rep))
		}
		t.Logf("%s: first at seed %d, in %d of %d runs:\n%s", issue, f.Seed, f.Count, rep.Runs, f.Script)
		if testing.Short() {
			continue
		}
		path := filepath.Join(t.TempDir(), "found.txt")
		if err := os.WriteFile(path, []byte(f.Script), 0o600); err != nil {
			t.Fatal(err)
		}
		rejected := strings.Fields(f.Violation.Detail)[0] + " (rejected)"
		for policy, want := range map[string]bool{"kubelet-1.36": true, "kdm": false} {
			tl, err := scenario.RunFile(path, policy)
			if err != nil {
				t.Fatalf("%s: replaying the script under %s: %v", issue, policy, err)
			}
			if got := scenario.FormatTimeline(tl); strings.Contains(got, rejected) != want {
				t.Errorf("%s: replay under %s: %q shown %v, want %v:\n%s", issue, policy, rejected, !want, want, got)
			}
		}
	}
}

func classes(rep *Report) []string {
	var out []string
	for _, f := range rep.Findings {
		out = append(out, f.Class)
	}
	return out
}

// TestKDMPolicyRandom: the kdm policy breaks no invariant in a bounded random run (make
// explore runs 100,000 seeds).
func TestKDMPolicyRandom(t *testing.T) {
	seeds := 2000
	if testing.Short() {
		seeds = 300
	}
	rep, err := Random(Config{Policy: "kdm", Seeds: seeds})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		t.Errorf("%s (seed %d, %d runs): %v\n%s", f.Class, f.Seed, f.Count, f.Violation.Detail, f.Script)
	}
	t.Logf("%d seeds, %d steps", rep.Runs, rep.Steps)
}

// TestExhaustiveStories walks every run of the stories in testdata/scenarios under every
// policy: under kdm none breaks an invariant; under each kubelet's policy exactly the stories
// of the known restart failures do, each with its own (the kubelet v1.37 changed none of
// them).
func TestExhaustiveStories(t *testing.T) {
	stories, err := filepath.Glob("../testdata/scenarios/*.txt")
	if err != nil || len(stories) < 10 {
		t.Fatalf("stories: %v %v", stories, err)
	}
	wantKubelet := map[string]string{"init-containers-restart.txt": issue138446, "node-reboot.txt": issue125579,
		"completed-pods-restart.txt":        issue117955,
		"plugin-gone-past-grace-reboot.txt": "removed after its grace period"}
	for _, path := range stories {
		name := filepath.Base(path)
		for _, policy := range devicemanager.PolicyNames() {
			rep, err := Exhaustive(Config{Policy: policy}, path, 0)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want := ""
			if pol := policyOf(t, policy); pol.IsKubelet() {
				want = wantKubelet[name]
				if name == "rolling-update-instances.txt" && !pol.PromoteLiveInstance {
					// The newest instance's exit disconnects the resource while the older
					// one still lists its devices: a new pod is refused (kubelet 1.36).
					want = string(NoNeedlessRejection)
				}
			}
			got := classes(rep)
			switch {
			case want == "" && len(got) > 0:
				t.Errorf("%s under %s: %v\n%s", name, policy, got, rep.Findings[0].Script)
			case want != "" && (len(got) != 1 || !strings.Contains(got[0], want)):
				t.Errorf("%s under %s: findings %v, want only %s", name, policy, got, want)
			}
			t.Logf("%s %s: %d runs, %d states, %d steps", name, policy, rep.Runs, rep.States, rep.Steps)
		}
	}
}

// TestPruningKeepsFindings: leaving states already explored finds what walking every run
// finds, in far fewer runs.
func TestPruningKeepsFindings(t *testing.T) {
	for _, story := range []string{"init-containers-restart.txt", "node-reboot.txt", "corrupt-checkpoint.txt"} {
		path := filepath.Join("../testdata/scenarios", story)
		full, err := exhaustive(Config{Policy: "kubelet-1.36"}, path, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		pruned, err := exhaustive(Config{Policy: "kubelet-1.36"}, path, 0, true)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := strings.Join(classes(full), "|"), strings.Join(classes(pruned), "|"); a != b {
			t.Errorf("%s: every run finds %q, pruned %q", story, a, b)
		}
		if pruned.Runs > full.Runs {
			t.Errorf("%s: pruned %d runs, full %d", story, pruned.Runs, full.Runs)
		}
	}
}

// TestDeterministic: a seed is a run, and a story's walk is the same walk every time (an
// Allocate answer with two environment variables used to marshal in either order, which
// made the same state look new).
func TestDeterministic(t *testing.T) {
	a, _, _ := randomRun(policyOf(t, "kdm"), true, 42, 200)
	b, _, _ := randomRun(policyOf(t, "kdm"), true, 42, 200)
	if Script(a, "", nil) != Script(b, "", nil) {
		t.Fatal("seed 42 gave two different runs")
	}
	story := "../testdata/scenarios/corrupt-checkpoint.txt"
	first, err := Exhaustive(Config{Policy: "kdm"}, story, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		again, err := Exhaustive(Config{Policy: "kdm"}, story, 0)
		if err != nil {
			t.Fatal(err)
		}
		if again.Runs != first.Runs || again.States != first.States || again.Steps != first.Steps {
			t.Fatalf("walk %d: %d runs, %d states, %d steps; first walk %d, %d, %d", i+2,
				again.Runs, again.States, again.Steps, first.Runs, first.States, first.Steps)
		}
	}
}

// TestInstancesFollowPolicy: the simulated manager treats a plugin's instances as each
// policy does. When the newer of two instances exits, the kubelet v1.36 disconnects the
// resource while the kubelet v1.37 and kdm hand it to the instance still connected; a second
// Register on one socket is refused by the kubelet v1.37 alone.
func TestInstancesFollowPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy           string
		served, accepted bool
	}{{"kubelet-1.36", false, true}, {"kubelet-1.37", true, false}, {"kdm", true, true}} {
		t.Run(tc.policy, func(t *testing.T) {
			w := newWorld(policyOf(t, tc.policy), true)
			w.apply(&Event{Kind: "plugin-start", Name: "gpu", Args: []string{"devices=2"}})
			w.apply(&Event{Kind: "plugin-add-instance", Name: "gpu"})
			w.apply(&Event{Kind: "plugin-stop-instance", Name: "gpu", Args: []string{"gpu-2.sock"}})
			res := domain + "gpu"
			if served := w.pluginServing(res) != nil; served != tc.served {
				t.Errorf("after the newer instance exited: served %v, want %v", served, tc.served)
			}
			if want := map[bool]int{true: 2, false: 0}[tc.served]; w.st.Healthy(res).Len() != want {
				t.Errorf("after the newer instance exited: %d healthy devices, want %d", w.st.Healthy(res).Len(), want)
			}
			if v := w.check(); v != nil {
				t.Fatalf("invariant broken: %v", v)
			}

			w = newWorld(policyOf(t, tc.policy), true)
			w.apply(&Event{Kind: "plugin-start", Name: "gpu", Args: []string{"devices=2"}})
			w.apply(&Event{Kind: "plugin-register-again", Name: "gpu"})
			p := w.plugins["gpu"]
			if accepted := p.instance == 2; accepted != tc.accepted {
				t.Errorf("second Register on gpu-1.sock: accepted %v, want %v", accepted, tc.accepted)
			}
			if w.pluginServing(res) == nil || w.st.Healthy(res).Len() != 2 {
				t.Errorf("after a second Register on one socket the resource is not served with its 2 devices")
			}
			w.apply(&Event{Kind: "plugin-stop-instance", Name: "gpu", Args: []string{"gpu-1.sock"}})
			if w.pluginServing(res) != nil || w.st.Healthy(res).Len() != 0 || p.alive {
				t.Errorf("the plugin's only process exited, yet the resource is served")
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Policy: "kdm"}, ""},
		{Config{Policy: "kubelet"}, ""},
		{Config{Policy: "kubelet-1.37"}, ""},
		{Config{}, `explore: Policy: unknown policy ""`},
		{Config{Policy: "kdm", Seeds: -1}, "explore: Seeds must not be negative, got -1"},
		{Config{Policy: "kdm", Steps: -5}, "explore: Steps must not be negative, got -5"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func BenchmarkRandomRun(b *testing.B) {
	policy := policyOf(b, "kdm")
	steps := 0
	seed := int64(0)
	for b.Loop() {
		_, _, n := randomRun(policy, true, seed, DefaultSteps)
		steps += n
		seed++
	}
	b.ReportMetric(float64(steps)/b.Elapsed().Seconds(), "steps/s")
}

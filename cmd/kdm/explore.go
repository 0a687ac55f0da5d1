package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/explore"
)

// exploreAbout is the description in `kdm explore --help`.
const exploreAbout = `Searches restart semantics (docs/explore.md): a simulated node around the manager's state core,
driven through seeded random runs or, with --story and --exhaustive, through every crash point
and order of a scenario script's run. Findings go to stdout as scenario scripts that
'kdm scenario' replays; the summary goes to stderr. Exits 1 when an invariant broke.`

// runExplore is `kdm explore`: random runs from seeds, or with --story and --exhaustive
// every run of a scenario script. Findings go to stdout as scenario scripts; progress to
// stderr. It exits 1 when an invariant broke, 2 on bad usage.
func runExplore(args []string, stdout, stderr io.Writer) int {
	c := newCommand("kdm explore", "kdm explore [--policy P] [--seeds N] [--seed S] [--steps N] [--story FILE --exhaustive [--max-runs N]]", exploreAbout, stdout, stderr)
	fs := c.flags
	policy := fs.String("policy", devicemanager.KDMPolicyName, explorePolicyHelp())
	seeds := fs.Int("seeds", 1000, "random runs to make")
	seed := fs.Int64("seed", 0, "the first run's seed; with --seeds 1, replays that run")
	steps := fs.Int("steps", explore.DefaultSteps, "steps per random run")
	story := fs.String("story", "", "a scenario script whose events drive the runs")
	exhaustive := fs.Bool("exhaustive", false, "with --story: every crash point and every order of the work a restart leaves")
	maxRuns := fs.Int("max-runs", 0, "with --exhaustive: stop after this many runs (0: no bound)")
	noRecords := fs.Bool("no-embedder-records", false, "the embedder keeps no copy of the assignments (as the kubelet): a lost checkpoint loses them")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return c.misuse("expected no arguments (a story goes with --story), got %d: %s", fs.NArg(), quoteArgs(fs.Args()))
	}
	if *exhaustive && *story == "" {
		return c.misuse("--exhaustive needs --story")
	}
	if *story != "" && !*exhaustive {
		return c.misuse("--story without --exhaustive: random runs draw their own events; add --exhaustive")
	}
	// The flags are checked here, by their names; explore's own errors name its Config fields.
	if _, err := devicemanager.ParsePolicy(*policy); err != nil {
		return c.misuse("--policy: %v", err)
	}
	if *seeds < 0 {
		return c.misuse("--seeds must not be negative, got %d", *seeds)
	}
	if *steps < 0 {
		return c.misuse("--steps must not be negative, got %d", *steps)
	}
	cfg := explore.Config{Policy: *policy, Seeds: *seeds, FirstSeed: *seed, Steps: *steps, NoRecords: *noRecords, Progress: stderr}
	var rep *explore.Report
	var err error
	switch {
	case *exhaustive:
		rep, err = explore.Exhaustive(cfg, *story, *maxRuns)
	default:
		rep, err = explore.Random(cfg)
	}
	if err != nil {
		// explore's errors start "explore: ", which the command's name already says.
		fmt.Fprintf(stderr, "kdm explore: %s\n", strings.TrimPrefix(err.Error(), "explore: "))
		return 2
	}
	// States are counted by an exhaustive walk only (the distinct states it reached); random
	// runs do not look for repeated states.
	states := ""
	if *exhaustive {
		states = fmt.Sprintf(" (%d distinct states)", rep.States)
	}
	fmt.Fprintf(stderr, "explore: %s: %d runs%s, %d steps in %v (%.0f steps/s), %d violations\n", rep.Policy, rep.Runs,
		states, rep.Steps, rep.Elapsed.Round(1e6), rep.StepsPerSecond(), rep.Violations())
	for _, f := range rep.Findings {
		where := fmt.Sprintf("first at seed %d", f.Seed)
		if *exhaustive {
			where = "exhaustive"
		}
		fmt.Fprintf(stdout, "# %s: %d runs, %s\n%s\n", f.Class, f.Count, where, f.Script)
	}
	if len(rep.Findings) > 0 {
		return 1
	}
	return 0
}

// explorePolicyHelp describes --policy from the supported kubelets' table, so that a new
// kubelet minor is listed without a change here.
func explorePolicyHelp() string {
	var kubelets []string
	for _, v := range devicemanager.KubeletVersions() {
		kubelets = append(kubelets, v.Name)
	}
	return fmt.Sprintf("the policy of the simulated manager: %s (alias %s: the newest) is that kubelet's device manager; %s adds kdm's improvements. The default is kdm, unlike run's (the newest kubelet) and scenario's (the zero Policy's kubelet): explore checks kdm's guarantees",
		strings.Join(kubelets, " or "), devicemanager.KubeletAlias, devicemanager.KDMPolicyName)
}

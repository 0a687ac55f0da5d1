package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/scenario"
)

// scenarioAbout is the description in `kdm scenario --help`.
const scenarioAbout = `Replays a restart-semantics script (testdata/scenarios/*.txt; the language is in
docs/scenario-language.md) against the real manager and prints its timeline: under one policy,
under every policy side by side (--compare), or drawn as an SVG (--svg).`

// runScenario is `kdm scenario`: a script's timeline under one policy, or under every policy
// side by side (--compare), or drawn as an SVG. The story goes to stdout, once; stderr gets
// only errors and the name of a written SVG. It exits 1 when the script fails, 2 on bad usage.
func runScenario(args []string, stdout, stderr io.Writer) int {
	c := newCommand("kdm scenario", "kdm scenario [--policy P | --compare [--width N]] [--svg OUT] FILE", scenarioAbout, stdout, stderr)
	fs := c.flags
	policy := fs.String("policy", scenario.DefaultPolicy, scenarioPolicyHelp())
	compare := fs.Bool("compare", false, "run under every policy ("+strings.Join(scenario.Policies(), ", ")+") and print the timelines side by side, a column per policy")
	width := fs.Int("width", scenario.DefaultWidth, "with --compare: the width of the page in characters; long lines wrap")
	svg := fs.String("svg", "", "draw the timelines of every policy as an SVG into `OUT`, a lane per policy and resource")
	if code, ok := c.parse(args); !ok {
		return code
	}
	switch fs.NArg() {
	case 0:
		return c.misuse("expected a scenario script, such as testdata/scenarios/node-reboot.txt")
	case 1:
	default:
		return c.misuse("expected one scenario script, got %d: %s", fs.NArg(), quoteArgs(fs.Args()))
	}
	if fs.Changed("policy") && (*compare || *svg != "") {
		return c.misuse("--compare and --svg run every policy; --policy goes without them")
	}
	file := fs.Arg(0)
	if !*compare && *svg == "" {
		tl, err := scenario.RunFile(file, *policy)
		if tl != nil {
			fmt.Fprint(stdout, scenario.FormatTimeline(tl))
		}
		if err != nil {
			fmt.Fprintf(stderr, "kdm scenario: %v\n", err)
			return 1
		}
		return 0
	}
	// A policy that fails is named on stderr; the others are printed all the same.
	timelines, runErr := scenario.RunFiles(file, scenario.Policies())
	if runErr != nil {
		fmt.Fprintf(stderr, "kdm scenario: %v\n", runErr)
	}
	if *compare {
		fmt.Fprint(stdout, scenario.FormatCompare(*width, timelines...))
	}
	if *svg != "" {
		if err := writeSVG(*svg, timelines); err != nil {
			fmt.Fprintf(stderr, "kdm scenario: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "kdm scenario: wrote %s\n", *svg)
	}
	if runErr != nil {
		return 1
	}
	return 0
}

// writeSVG draws timelines into the file at path.
func writeSVG(path string, timelines []*scenario.Timeline) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := scenario.RenderSVG(f, timelines...); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// scenarioPolicyHelp describes --policy from the supported kubelets' table, so that a new
// kubelet minor is listed without a change here.
func scenarioPolicyHelp() string {
	var kubelets []string
	for _, v := range devicemanager.KubeletVersions() {
		kubelets = append(kubelets, v.Name)
	}
	return fmt.Sprintf("the policy to replay under: %s (alias %s: the newest) replays that kubelet's device manager; %s adds deferred admission and kdm's other improvements. "+
		"The default is %s, the zero Policy's kubelet, which the stories were first recorded under and which stays the baseline when minors are added (run defaults to the newest kubelet, explore to kdm)",
		strings.Join(kubelets, " or "), devicemanager.KubeletAlias, devicemanager.KDMPolicyName, scenario.DefaultPolicy)
}

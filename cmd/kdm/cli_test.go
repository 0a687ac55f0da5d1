package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelp: kdm --help, -h and help, and every subcommand's --help and -h, print the usage to
// stdout, nothing to stderr, and exit 0. The texts are golden.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 0 || errOut.Len() != 0 {
			t.Fatalf("kdm %s: exit %d, stderr %q; want 0 and nothing", args[0], code, errOut.String())
		}
		checkGolden(t, "cli/help", out.String())
	}
	for _, c := range subcommands() {
		t.Run(c.name, func(t *testing.T) {
			var help string
			for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
				var out, errOut bytes.Buffer
				if code := run(args, &out, &errOut); code != 0 || errOut.Len() != 0 {
					t.Fatalf("kdm %s: exit %d, stderr %q; want 0 and nothing", strings.Join(args, " "), code, errOut.String())
				}
				if help != "" && out.String() != help {
					t.Fatalf("kdm %s prints another text than kdm %s --help", strings.Join(args, " "), c.name)
				}
				help = out.String()
			}
			if !strings.HasPrefix(help, "usage: kdm "+c.name) {
				t.Errorf("kdm %s --help does not start with its synopsis:\n%s", c.name, help)
			}
			checkGolden(t, "cli/help-"+c.name, help)
		})
	}
}

// TestUsageErrors: a bad command line says on stderr what was wrong and where the usage is,
// prints nothing on stdout, and exits 2, before anything starts. The messages are golden.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no-command", nil},
		{"unknown-command", []string{"frobnicate"}},
		{"inspect-two-files", []string{"inspect", "A", "B"}},
		{"inspect-unknown-flag", []string{"inspect", "--bogus", "A"}},
		{"inspect-single-dash", []string{"inspect", "-json", "A"}},
		{"inspect-narrow", []string{"inspect", "--width", "20", "A"}},
		{"run-arguments", []string{"run", "now"}},
		{"run-bad-value", []string{"run", "--grace-period", "soon"}},
		{"get-nothing", []string{"get"}},
		{"get-unknown-kind", []string{"get", "gpus"}},
		{"get-two-kinds", []string{"get", "pods", "devices"}},
		{"get-bad-output", []string{"get", "pods", "-o", "yaml"}},
		{"demo-arguments", []string{"demo", "now"}},
		{"scenario-no-file", []string{"scenario"}},
		{"scenario-policy-and-compare", []string{"scenario", "--compare", "--policy", "kdm", "x.txt"}},
		{"explore-arguments", []string{"explore", "x.txt"}},
		{"explore-exhaustive-without-story", []string{"explore", "--exhaustive"}},
		{"explore-story-without-exhaustive", []string{"explore", "--story", "x.txt"}},
		{"version-bad-output", []string{"version", "-o", "yaml"}},
		{"conformance-no-command", []string{"conformance", "--json"}},
		{"conformance-single-dash", []string{"conformance", "-json", "--", "plugin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(tc.args, &out, &errOut); code != 2 || out.Len() != 0 {
				t.Fatalf("kdm %q: exit %d, stdout %q; want 2 and nothing", tc.args, code, out.String())
			}
			checkGolden(t, "cli/error-"+tc.name, errOut.String())
		})
	}
}

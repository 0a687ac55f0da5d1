// Command kdm is the kdm node agent and its tools:
//
//	kdm run          run the device manager, podresources and the pod manifest source
//	kdm get          ask a running kdm: its pods, devices, resources or plugins
//	kdm inspect      decode, verify and print a kubelet_internal_checkpoint
//	kdm demo         a self-contained tour: manager, mock GPUs, sample pods, a restart
//	kdm scenario     replay a restart-semantics script under the kubelet and kdm policies
//	kdm explore      search restart semantics: seeded random runs or every run of a story
//	kdm conformance  check a device plugin's restart behaviour, as csi-sanity does for CSI
//	kdm version      print kdm's version
//
// Every subcommand takes pflag-style flags (--name value, --name=value) and prints its usage
// to stdout with --help; a bad command line exits 2 saying what was wrong (see cli.go).
package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// subcommand is one of kdm's commands as the top-level usage lists it.
type subcommand struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// subcommands are kdm's commands, in the order the usage lists them.
func subcommands() []subcommand {
	return []subcommand{
		{"run", "run the device manager, podresources and the pod manifest source", runDaemon},
		{"get", "ask a running kdm: its pods, devices, resources or plugins", runGet},
		{"inspect", "decode, verify and print a kubelet_internal_checkpoint", runInspect},
		{"demo", "a self-contained tour: manager, mock GPUs, sample pods, a restart", runDemo},
		{"scenario", "replay a restart-semantics script under the kubelet and kdm policies", runScenario},
		{"explore", "search restart semantics: seeded random runs or every run of a story", runExplore},
		{"conformance", "check a device plugin against the kubelet's expectations (-- PLUGIN-COMMAND ...)", runConformance},
		{"version", "print kdm's version", runVersion},
	}
}

// printTopUsage writes kdm's usage: its commands, aligned.
func printTopUsage(w io.Writer) {
	fmt.Fprint(w, "usage: kdm <command> [flags]\n\ncommands:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range subcommands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	_ = tw.Flush()
	fmt.Fprint(w, "\nRun 'kdm <command> --help' for the command's flags.\n")
}

// run dispatches to a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "kdm: no command given\n\n")
		printTopUsage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help":
		if len(rest) > 0 { // kdm help inspect
			return run([]string{rest[0], "--help"}, stdout, stderr)
		}
		printTopUsage(stdout)
		return exitOK
	case "-h", "--help":
		printTopUsage(stdout)
		return exitOK
	case "--version":
		return runVersion(nil, stdout, stderr)
	}
	for _, c := range subcommands() {
		if c.name == name {
			return c.run(rest, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "kdm: unknown command %q\nRun 'kdm --help' for the commands.\n", name)
	return exitUsage
}

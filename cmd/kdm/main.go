// Command kdm is the kdm node agent and its tools:
//
//	kdm run        run the device manager, podresources and the pod manifest source
//	kdm inspect    decode, verify and print a kubelet_internal_checkpoint
//	kdm demo       a self-contained tour: manager, mock GPUs, sample pods, a restart
//	kdm scenario   replay a restart-semantics script under one policy or every policy side by side
//	kdm explore    search restart semantics: seeded random runs or every run of a story
//	kdm conformance  check a device plugin's restart behaviour, as csi-sanity does for CSI
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: kdm <command> [flags]

commands:
  run        run the device manager, podresources and the pod manifest source
  inspect    decode, verify and print a kubelet_internal_checkpoint
  demo       a self-contained tour: manager, mock GPUs, sample pods, a restart
  scenario   replay a restart-semantics script under one policy or every policy side by side
  explore    search restart semantics: seeded random runs or every run of a story
  conformance  check a device plugin against the kubelet's expectations (-- PLUGIN-COMMAND ...)

Run 'kdm <command> -h' for the command's flags.
`

// run dispatches to a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return runDaemon(rest, stdout, stderr)
	case "inspect":
		return runInspect(rest, stdout, stderr)
	case "demo":
		return runDemo(rest, stdout, stderr)
	case "scenario":
		return runScenario(rest, stdout, stderr)
	case "explore":
		return runExplore(rest, stdout, stderr)
	case "conformance":
		return runConformance(rest, stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "kdm: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
}

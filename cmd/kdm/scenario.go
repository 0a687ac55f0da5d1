package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/kdm-project/kdm/scenario"
)

func runScenario(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kdm scenario", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policy := fs.String("policy", "kubelet-1.36", "kubelet-1.36 (the kubelet's behaviour) or kdm (kdm's improvements)")
	compare := fs.Bool("compare", false, "run under both policies and print the timelines side by side")
	svg := fs.String("svg", "", "also draw both timelines as an SVG into `OUT`")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kdm scenario [--policy P | --compare] [--svg OUT] FILE")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
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
	a, errA := scenario.RunFile(file, "kubelet-1.36")
	b, errB := scenario.RunFile(file, "kdm")
	for _, err := range []error{errA, errB} {
		if err != nil {
			fmt.Fprintf(stderr, "kdm scenario: %v\n", err)
			return 1
		}
	}
	if *compare {
		fmt.Fprint(stdout, scenario.FormatCompare(a, b))
	}
	if *svg != "" {
		f, err := os.Create(*svg)
		if err != nil {
			fmt.Fprintf(stderr, "kdm scenario: %v\n", err)
			return 1
		}
		if err := scenario.RenderSVG(f, a, b); err != nil {
			_ = f.Close()
			fmt.Fprintf(stderr, "kdm scenario: %v\n", err)
			return 1
		}
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "kdm scenario: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "kdm scenario: wrote %s\n", *svg)
	}
	return 0
}

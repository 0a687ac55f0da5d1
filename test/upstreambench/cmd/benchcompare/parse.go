package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// result is one benchmark line of `go test -bench` output.
type result struct {
	// name is the benchmark's name without "Benchmark" and the -GOMAXPROCS suffix,
	// such as "Allocate/pods=100/kubelet".
	name    string
	nsPerOp float64
}

// benchLine matches "BenchmarkX/y-2   	  123	  4567 ns/op ..."; the GOMAXPROCS suffix is
// absent when GOMAXPROCS is 1.
var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+([0-9.]+) ns/op`)

// parse reads the benchmark results of one run of the test binary. A run that reports
// a failing benchmark is an error: its other numbers may not mean what they say.
func parse(r io.Reader) ([]result, error) {
	var out []result
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "--- FAIL") || line == "FAIL" {
			return nil, fmt.Errorf("a benchmark failed: %s", line)
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ns, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return nil, fmt.Errorf("benchmark line %q: %w", line, err)
		}
		out = append(out, result{name: m[1], nsPerOp: ns})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading benchmark output: %w", err)
	}
	return out, nil
}

package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// result is one benchmark of `go test -bench -v` output.
type result struct {
	// name is the benchmark's name without "Benchmark" and the -GOMAXPROCS suffix,
	// such as "Allocate/pods=100/kubelet".
	name    string
	nsPerOp float64
	// metrics are the other values the line reports by unit ("peak-MiB", "start-us/op"),
	// without B/op and allocs/op.
	metrics map[string]float64
	// skipped is set for a benchmark that skipped itself: what it logged (its reason), and
	// nsPerOp means nothing.
	skipped string
}

// benchLine matches "BenchmarkX/y-2   	  123	  4567 ns/op ..."; the GOMAXPROCS suffix is
// absent when GOMAXPROCS is 1.
var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+([0-9.]+) ns/op((?:\s+[0-9.e+-]+ \S+)*)\s*$`)

// skipLine matches "--- SKIP: BenchmarkX/y" (with -v); logLine the lines a benchmark logged
// before it, "    file.go:12: message".
var (
	skipLine = regexp.MustCompile(`^--- SKIP: Benchmark(\S+?)(?:-\d+)?(?: \(.*\))?$`)
	logLine  = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)$`)
)

// parse reads the benchmark results of one run of the test binary (run with -test.v, so
// that skipped benchmarks say why). A run that reports a failing benchmark is an error: its
// other numbers may not mean what they say.
func parse(r io.Reader) ([]result, error) {
	var out []result
	var logged []string // what the running benchmark logged so far
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "--- FAIL") || line == "FAIL" {
			return nil, fmt.Errorf("a benchmark failed: %s", line)
		}
		if m := logLine.FindStringSubmatch(line); m != nil {
			logged = append(logged, m[1])
			continue
		}
		if m := skipLine.FindStringSubmatch(line); m != nil {
			out = append(out, result{name: m[1], skipped: strings.Join(logged, "; ")})
			logged = nil
			continue
		}
		if strings.HasPrefix(line, "Benchmark") {
			logged = nil
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ns, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return nil, fmt.Errorf("benchmark line %q: %w", line, err)
		}
		res := result{name: m[1], nsPerOp: ns}
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			if f[i+1] == "B/op" || f[i+1] == "allocs/op" {
				continue
			}
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchmark line %q: %s: %w", line, f[i+1], err)
			}
			if res.metrics == nil {
				res.metrics = map[string]float64{}
			}
			res.metrics[f[i+1]] = v
		}
		out = append(out, res)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading benchmark output: %w", err)
	}
	return out, nil
}

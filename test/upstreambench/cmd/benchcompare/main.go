// Command benchcompare runs the upstreambench benchmarks in interleaved rounds and prints,
// per kubelet release, a table of the kubelet's device manager against kdm: per benchmark
// the median time per op with its min..max over the rounds, and the ratio kubelet / kdm
// (above 1: kdm is faster) computed round by round. It also reports the machine and its load
// average before and after, since both move the numbers.
//
// Run it from the module directory (test/upstreambench), as `make bench-compare` does:
//
//	go run ./cmd/benchcompare -rounds 5 -benchtime 1s -out ../../docs/benchmarks.md
//
// Each module of -modules (the parent, which measures the newest kubelet beside kdm, and a
// nested module per older kubelet release, which measures that kubelet alone) gives one test
// binary, built once. Each round runs every binary once, in turn, so within a round every
// /kubelet-1.x sub-benchmark is close in time to its /kdm siblings, and rounds alternate in
// time; a table's ratios pair its kubelet with kdm round by round. With -out, the tables
// replace the part of the file between the lines "<!-- bench-compare:begin -->" and
// "<!-- bench-compare:end -->".
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
}

func run() error {
	roundsN := flag.Int("rounds", 5, "how many times to run every benchmark")
	benchtime := flag.String("benchtime", "1s", "go test -benchtime for each benchmark in each round")
	bench := flag.String("bench", ".", "go test -bench pattern")
	out := flag.String("out", "", "Markdown file whose bench-compare section receives the tables")
	modules := flag.String("modules", ".,kubelet136", "comma-separated module directories whose benchmarks run, newest kubelet first; the first also measures kdm")
	flag.Parse()
	if *roundsN < 1 {
		return errors.New("-rounds must be at least 1")
	}
	if *out != "" {
		if _, err := os.Stat(*out); err != nil {
			return err
		}
	}

	tmp, err := os.MkdirTemp("", "benchcompare")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	var bins []testBinary
	for i, dir := range strings.Split(*modules, ",") {
		b, err := build(strings.TrimSpace(dir), filepath.Join(tmp, fmt.Sprintf("upstreambench-%d.test", i)))
		if err != nil {
			return err
		}
		bins = append(bins, b)
	}

	loadBefore, started := loadAverage(), time.Now().UTC()
	rs := newRounds()
	var kubelets []kubelet
	for i := 1; i <= *roundsN; i++ {
		fmt.Fprintf(os.Stderr, "round %d of %d\n", i, *roundsN)
		var round []result
		for _, bin := range bins {
			results, err := bin.run(tmp, *bench, *benchtime)
			if err != nil {
				return fmt.Errorf("round %d: %s: %w", i, bin.module, err)
			}
			if i == 1 {
				kubelets = appendKubelets(kubelets, results, bin.version)
			}
			round = append(round, results...)
		}
		if len(round) == 0 {
			return fmt.Errorf("round %d: no benchmark matched %q", i, *bench)
		}
		rs.add(round)
	}
	loadAfter := loadAverage()

	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s/%s, %s, %d CPUs, %s; %d interleaved rounds of -benchtime %s, %s in all.\n",
		started.Format("2006-01-02 15:04 MST"), runtime.GOOS, runtime.GOARCH, cpuModel(), runtime.NumCPU(), runtime.Version(),
		*roundsN, *benchtime, time.Since(started).Round(time.Second))
	fmt.Fprintf(&b, "Load average (1, 5, 15 min): %s before, %s after.\n\n", loadBefore, loadAfter)
	b.WriteString("One table per kubelet release; kdm's column is the same run in each. Each cell: median (min..max) over the rounds. " +
		"The ratio is computed per round; above 1, kdm is faster.\n\n")
	b.WriteString(render(rs, kubelets))
	fmt.Print(b.String())
	if *out != "" {
		return replaceSection(*out, b.String())
	}
	return nil
}

// testBinary is one module's benchmarks, compiled.
type testBinary struct {
	module  string // its directory
	path    string
	version string // of k8s.io/kubernetes in the module's build list
}

// build compiles the benchmarks of the module in dir into path.
func build(dir, path string) (testBinary, error) {
	fmt.Fprintf(os.Stderr, "building the benchmarks of %s (a cold cache compiles k8s.io/kubernetes: minutes)\n", dir)
	cmd := command("go", "test", "-c", "-o", path, ".")
	cmd.Dir = dir
	if err := cmd.Run(); err != nil {
		return testBinary{}, fmt.Errorf("building the benchmarks of %s: %w", dir, err)
	}
	// A module may pin the kubelet with a replace; the replacement is what is built.
	list := exec.Command("go", "list", "-m", "-f", "{{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}", "k8s.io/kubernetes")
	list.Dir = dir
	version, err := list.Output()
	if err != nil {
		return testBinary{}, fmt.Errorf("reading the kubelet's version in %s: %w", dir, err)
	}
	return testBinary{module: dir, path: path, version: strings.TrimSpace(string(version))}, nil
}

// run runs the benchmarks matching bench once, in dir, and returns their results.
func (t testBinary) run(dir, bench, benchtime string) ([]result, error) {
	var stdout bytes.Buffer
	cmd := command(t.path, "-test.run", "^$", "-test.bench", bench, "-test.benchtime", benchtime, "-test.count", "1")
	cmd.Dir = dir // the benchmarks make their own directories; keep the module clean
	cmd.Stdout = &stdout
	if err := cmd.Run(); err != nil {
		_, _ = os.Stderr.Write(stdout.Bytes())
		return nil, err
	}
	return parse(&stdout)
}

// command runs in the current directory with its output on stderr (progress, not results).
func command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd
}

// loadAverage is the first three fields of /proc/loadavg, what uptime prints.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

const (
	beginMarker = "<!-- bench-compare:begin -->"
	endMarker   = "<!-- bench-compare:end -->"
)

// replaceSection puts section between path's markers, replacing what was there.
func replaceSection(path, section string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	updated, err := withSection(string(b), section)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(updated), 0o644)
}

// withSection returns doc with the text between its markers replaced by section.
func withSection(doc, section string) (string, error) {
	before, rest, ok := strings.Cut(doc, beginMarker+"\n")
	if !ok {
		return "", fmt.Errorf("no %q line", beginMarker)
	}
	_, after, ok := strings.Cut(rest, endMarker)
	if !ok {
		return "", fmt.Errorf("no %q after %q", endMarker, beginMarker)
	}
	return before + beginMarker + "\n" + section + endMarker + after, nil
}

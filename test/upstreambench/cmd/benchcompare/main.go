// Command benchcompare runs the upstreambench benchmarks in interleaved rounds and prints
// a table of the kubelet's device manager against kdm: per benchmark the median time per
// op with its min..max over the rounds, and the ratio kubelet / kdm (above 1: kdm is
// faster) computed round by round. It also reports the machine and its load average
// before and after, since both move the numbers.
//
// Run it from the module directory (test/upstreambench), as `make bench-compare` does:
//
//	go run ./cmd/benchcompare -rounds 5 -benchtime 1s -out ../../docs/benchmarks.md
//
// The test binary is built once; each round runs it once, so within a round every
// /kubelet sub-benchmark is followed by its /kdm siblings, and rounds alternate in time.
// With -out, the table replaces the part of the file between the lines
// "<!-- bench-compare:begin -->" and "<!-- bench-compare:end -->".
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
	out := flag.String("out", "", "Markdown file whose bench-compare section receives the table")
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
	bin := filepath.Join(tmp, "upstreambench.test")
	fmt.Fprintln(os.Stderr, "building the benchmark binary (a cold cache compiles k8s.io/kubernetes: minutes)")
	if err := command("go", "test", "-c", "-o", bin, ".").Run(); err != nil {
		return fmt.Errorf("building the benchmarks: %w", err)
	}
	version, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes").Output()
	if err != nil {
		return fmt.Errorf("reading the kubelet's version: %w", err)
	}

	loadBefore, started := loadAverage(), time.Now().UTC()
	rs := newRounds()
	for i := 1; i <= *roundsN; i++ {
		fmt.Fprintf(os.Stderr, "round %d of %d\n", i, *roundsN)
		var stdout bytes.Buffer
		cmd := command(bin, "-test.run", "^$", "-test.bench", *bench, "-test.benchtime", *benchtime, "-test.count", "1")
		cmd.Dir = tmp // the benchmarks make their own directories; keep the module clean
		cmd.Stdout = &stdout
		if err := cmd.Run(); err != nil {
			_, _ = os.Stderr.Write(stdout.Bytes())
			return fmt.Errorf("round %d: %w", i, err)
		}
		results, err := parse(&stdout)
		if err != nil {
			return fmt.Errorf("round %d: %w", i, err)
		}
		if len(results) == 0 {
			return fmt.Errorf("round %d: no benchmark matched %q", i, *bench)
		}
		rs.add(results)
	}
	loadAfter := loadAverage()

	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s/%s, %s, %d CPUs, %s; %d interleaved rounds of -benchtime %s, %s in all.\n",
		started.Format("2006-01-02 15:04 MST"), runtime.GOOS, runtime.GOARCH, cpuModel(), runtime.NumCPU(), runtime.Version(),
		*roundsN, *benchtime, time.Since(started).Round(time.Second))
	fmt.Fprintf(&b, "Load average (1, 5, 15 min): %s before, %s after.\n\n", loadBefore, loadAfter)
	b.WriteString("Each cell: median (min..max) over the rounds. The ratio is computed per round; above 1, kdm is faster.\n\n")
	b.WriteString(render(rs, strings.TrimSpace(string(version))))
	fmt.Print(b.String())
	if *out != "" {
		return replaceSection(*out, b.String())
	}
	return nil
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

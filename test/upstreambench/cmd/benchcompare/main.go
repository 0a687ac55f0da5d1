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
// Each module of -modules (by default the parent, which measures the newest kubelet beside
// kdm, then test/upstreambench/kubelet-<minor> for every older row of the table in
// devicemanager/kubelets.go, newest first, which builds package olderkubelet against that
// release and measures that kubelet alone) gives one test binary, built once. Each round runs every binary once, in turn, so within a round every
// /kubelet-1.x sub-benchmark is close in time to its /kdm siblings, and rounds alternate in
// time; a table's ratios pair its kubelet with kdm round by round. With -out, the tables
// replace the part of the file between the lines "<!-- bench-compare:begin -->" and
// "<!-- bench-compare:end -->". Each kdm row is also given as a multiple of its floor, the
// Floor benchmark of the same run that floorRules names for it: a lower bound of the row's
// op. The Reference benchmarks, which are not lower bounds, are listed in a table of their own.
//
// With -out, it writes nothing when the 1-minute load average before or after the run is
// above the CPU count (a run that would be refused stops before measuring): other work
// competing for the CPUs moves every figure. -loaded writes such a run's tables anyway,
// headed "LOADED: not a quiet run".
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/kdm-project/kdm/devicemanager"
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
	modules := flag.String("modules", strings.Join(defaultModules(devicemanager.KubeletVersions()), ","), "comma-separated module directories whose benchmarks run, newest kubelet first; the first also measures kdm")
	loaded := flag.Bool("loaded", false, "with -out, write the tables even when the 1-minute load average before or after the run is above the CPU count, marked \""+loadedMark+"\"")
	flag.Parse()
	if *roundsN < 1 {
		return errors.New("-rounds must be at least 1")
	}
	if *out != "" {
		if _, err := os.Stat(*out); err != nil {
			return err
		}
	}
	gate := loadGate{read: readLoad, cpus: runtime.NumCPU(), allowLoaded: *loaded}
	loadBefore, err := gate.start(*out != "")
	if err != nil {
		return err
	}

	tmp, err := os.MkdirTemp("", "benchcompare")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	dirs := strings.Split(*modules, ",")
	var bins []testBinary
	for i, dir := range dirs {
		b, err := build(strings.TrimSpace(dir), filepath.Join(tmp, fmt.Sprintf("upstreambench-%d.test", i)))
		if err != nil {
			return err
		}
		bins = append(bins, b)
	}

	started := time.Now().UTC()
	rs := newRounds()
	var kubelets []kubelet
	for i := 1; i <= *roundsN; i++ {
		fmt.Fprintf(os.Stderr, "round %d of %d\n", i, *roundsN)
		var round []result
		for _, bin := range bins {
			results, err := bin.runEach(tmp, *bench, *benchtime)
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
	loadAfter := gate.end()

	var b strings.Builder
	writeHeader(&b, started, loadBefore, loadAfter, *roundsN, *benchtime)
	b.WriteString("One table per kubelet release; kdm's column is the same run in each. Each cell: median (min..max) over the rounds. " +
		"The ratios are computed per round: kubelet / kdm above 1, kdm is faster; kdm / floor is kdm's time over its floor's, " +
		"the `Floor/` row of the same round named in the last column: a lower bound of the row's op, so the ratio is at least 1 but for the noise of disk syncs, " +
		"and how far above 1 is what kdm's op costs beyond the work it cannot avoid. " +
		"The references (`Reference/`) are not lower bounds and have no ratio.\n\n")
	b.WriteString(render(rs, kubelets))
	return gate.publish(*out, beginMarker, endMarker, loadBefore, loadAfter, b.String())
}

// writeHeader writes when and where a measurement ran, and the load around it.
func writeHeader(b *strings.Builder, started time.Time, loadBefore, loadAfter load, rounds int, benchtime string) {
	fmt.Fprintf(b, "Measured %s on %s/%s, %s, %d CPUs, %s; %d interleaved rounds of -benchtime %s, %s in all.\n",
		started.Format("2006-01-02 15:04 MST"), runtime.GOOS, runtime.GOARCH, cpuModel(), runtime.NumCPU(), runtime.Version(),
		rounds, benchtime, time.Since(started).Round(time.Second))
	fmt.Fprintf(b, "Load average (1, 5, 15 min): %s before, %s after.\n\n", loadBefore.text, loadAfter.text)
}

// testBinary is one module's benchmarks, compiled.
type testBinary struct {
	module  string // its directory
	path    string
	version string // of k8s.io/kubernetes in the module's build list
}

// defaultModules are the module directories -modules defaults to: the parent module (the
// newest kubelet, beside kdm), then one per older kubelet row, newest first, named by the
// row's policy name.
func defaultModules(versions []devicemanager.KubeletVersion) []string {
	dirs := []string{"."}
	for i := len(versions) - 2; i >= 0; i-- {
		dirs = append(dirs, versions[i].Name)
	}
	return dirs
}

// olderKubeletPackage is the package a per-minor module builds, under the build tag of the
// same name: the benchmarks of one older kubelet release, written once for all of them.
const olderKubeletPackage = "github.com/kdm-project/kdm/test/upstreambench/olderkubelet"

// buildArgs are the go test arguments that compile the benchmarks of the module in dir into
// path: the parent module's own package, or olderkubelet in a per-minor module, named after
// the module's directory (the row's policy name).
func buildArgs(dir, path string) []string {
	if filepath.Clean(dir) == "." {
		return []string{"test", "-c", "-o", path, "."}
	}
	return []string{"test", "-c", "-tags", "olderkubelet", "-ldflags", "-X " + olderKubeletPackage + ".name=" + filepath.Base(dir),
		"-o", path, olderKubeletPackage}
}

// build compiles the benchmarks of the module in dir into path.
func build(dir, path string) (testBinary, error) {
	fmt.Fprintf(os.Stderr, "building the benchmarks of %s (a cold cache compiles k8s.io/kubernetes: minutes)\n", dir)
	cmd := command("go", buildArgs(dir, path)...)
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
	cmd := command(t.path, "-test.run", "^$", "-test.bench", bench, "-test.benchtime", benchtime, "-test.count", "1", "-test.v")
	cmd.Dir = dir // the benchmarks make their own directories; keep the module clean
	cmd.Stdout = &stdout
	if err := cmd.Run(); err != nil {
		_, _ = os.Stderr.Write(stdout.Bytes())
		return nil, err
	}
	return parse(&stdout)
}

// runEach runs the benchmarks matching bench as run does, each top-level benchmark
// (BenchmarkAllocate, BenchmarkFloor, ...) in a process of its own, so that no benchmark
// measures the leftovers of another (a heap grown by a million-device list, the writeback of
// its 36 MiB files); within one, the kubelet's sub-benchmark still runs right before kdm's.
// When BenchmarkFloor is among them, the floors of a benchmark's kdm rows run right after it,
// in a process of their own, so that a row and its floor see the same machine; BenchmarkFloor
// then runs on its own only if no row named a floor.
func (t testBinary) runEach(dir, bench, benchtime string) ([]result, error) {
	first, rest := splitBench(bench)
	cmd := exec.Command(t.path, "-test.list", first)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the benchmarks of %s: %w", t.module, err)
	}
	var names []string
	hasFloor := false
	for _, name := range strings.Fields(string(out)) {
		switch {
		case !strings.HasPrefix(name, "Benchmark"): // a test or an example
		case name == floorBenchmark:
			hasFloor = true
		default:
			names = append(names, name)
		}
	}
	var all []result
	floorsRun := false
	for _, name := range names {
		results, err := t.run(dir, "^"+regexp.QuoteMeta(name)+"$"+rest, benchtime)
		if err != nil {
			return nil, err
		}
		all = append(all, results...)
		if pattern := floorPattern(results); hasFloor && pattern != "" {
			floors, err := t.run(dir, pattern, benchtime)
			if err != nil {
				return nil, err
			}
			all = append(all, floors...)
			floorsRun = true
		}
	}
	if hasFloor && !floorsRun {
		floors, err := t.run(dir, "^"+floorBenchmark+"$"+rest, benchtime)
		if err != nil {
			return nil, err
		}
		all = append(all, floors...)
	}
	return all, nil
}

// floorBenchmark is the top-level benchmark of the floors.
const floorBenchmark = "BenchmarkFloor"

// floorPattern is the -bench pattern of the floors of results' kdm rows, "" if they have none.
func floorPattern(results []result) string {
	var subs []string
	for _, res := range results {
		if name := floorFor(res.name); name != "" {
			sub := regexp.QuoteMeta(strings.TrimPrefix(name, "Floor/"))
			if !slices.Contains(subs, sub) {
				subs = append(subs, sub)
			}
		}
	}
	if len(subs) == 0 {
		return ""
	}
	return "^" + floorBenchmark + "$/^(" + strings.Join(subs, "|") + ")$"
}

// splitBench splits a -bench pattern into the part that matches top-level benchmarks and the
// rest, with its leading slash ("" when there is none).
func splitBench(bench string) (first, rest string) {
	first, rest, found := strings.Cut(bench, "/")
	if found {
		rest = "/" + rest
	}
	return first, rest
}

// command runs in the current directory with its output on stderr (progress, not results).
func command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd
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

// replaceSection puts section between path's lines begin and end, replacing what was there.
func replaceSection(path, begin, end, section string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	updated, err := withSection(string(b), begin, end, section)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(updated), 0o644)
}

// withSection returns doc with the text between its lines begin and end replaced by section.
func withSection(doc, begin, end, section string) (string, error) {
	before, rest, ok := strings.Cut(doc, begin+"\n")
	if !ok {
		return "", fmt.Errorf("no %q line", begin)
	}
	_, after, ok := strings.Cut(rest, end)
	if !ok {
		return "", fmt.Errorf("no %q after %q", end, begin)
	}
	return before + begin + "\n" + section + end + after, nil
}

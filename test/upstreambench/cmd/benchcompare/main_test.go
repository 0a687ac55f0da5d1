package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/kdm-project/kdm/devicemanager"
)

const sample = `goos: linux
BenchmarkAllocate/pods=0/kubelet-1.37-2         	     150	   1470140 ns/op
BenchmarkAllocate/pods=0/kdm-2             	      56	   6576950 ns/op
BenchmarkAllocate/pods=10000,departs=oldest
BenchmarkAllocate/pods=10000,departs=oldest/kubelet-1.37
    bench.go:61: not run: too slow
--- SKIP: BenchmarkAllocate/pods=10000,departs=oldest/kubelet-1.37
BenchmarkAllocate/pods=10000,departs=oldest/kdm-2         	       1	 136045219 ns/op
BenchmarkCheckpointEncode/pods=1000,devices=4/kubelet-1.36-2 	       1	 155460567 ns/op	46254128 B/op	 1303517 allocs/op
BenchmarkListAndWatchUpdate/devices=1000/kdm,policy=kdm 	      34	   9847389 ns/op
BenchmarkRestart/devices=1000,pods=250/kdm-2 	      16	   8107015 ns/op	      4290 capacity-us/op	      1785 start-us/op
BenchmarkFloor/rpc-2                                    	    3816	     59080 ns/op
PASS
`

func TestParse(t *testing.T) {
	got, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := []result{
		{name: "Allocate/pods=0/kubelet-1.37", nsPerOp: 1470140},
		{name: "Allocate/pods=0/kdm", nsPerOp: 6576950},
		{name: "Allocate/pods=10000,departs=oldest/kubelet-1.37", skipped: "not run: too slow"},
		{name: "Allocate/pods=10000,departs=oldest/kdm", nsPerOp: 136045219},
		{name: "CheckpointEncode/pods=1000,devices=4/kubelet-1.36", nsPerOp: 155460567},
		{name: "ListAndWatchUpdate/devices=1000/kdm,policy=kdm", nsPerOp: 9847389},
		{name: "Restart/devices=1000,pods=250/kdm", nsPerOp: 8107015, metrics: map[string]float64{"capacity-us/op": 4290, "start-us/op": 1785}},
		{name: "Floor/rpc", nsPerOp: 59080},
	}
	if len(got) != len(want) {
		t.Fatalf("parse = %v, want %v", got, want)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("result %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseFailure(t *testing.T) {
	if _, err := parse(strings.NewReader("--- FAIL: BenchmarkAllocate/pods=0/kdm\nFAIL\n")); err == nil {
		t.Error("parse accepted the output of a failing benchmark")
	}
}

// r is a result of ns nanoseconds per op.
func r(name string, ns float64) result { return result{name: name, nsPerOp: ns} }

func TestRender(t *testing.T) {
	rs := newRounds()
	// Each round holds the parent binary's results (kubelet-1.37, kdm, floor) and then the
	// per-minor binary's (the older kubelet alone).
	rs.add([]result{r("A/kubelet-1.37", 300), r("A/kdm", 100), r("B/kdm", 5e6), r("Floor/rpc", 2000), r("A/kubelet-1.36", 600)})
	rs.add([]result{r("A/kubelet-1.37", 200), r("A/kdm", 200), r("B/kdm", 7e6), r("Floor/rpc", 4000), r("A/kubelet-1.36", 400)})
	rs.add([]result{r("A/kubelet-1.37", 900), r("A/kdm", 300), r("A/kdm,policy=kdm", 30), r("Floor/rpc", 3000), r("A/kubelet-1.36", 1800),
		{name: "B/kubelet-1.36", skipped: "not run: too slow"}})
	got := render(rs, []kubelet{{"kubelet-1.37", "v1.37.2"}, {"kubelet-1.36", "v1.36.3"}})
	tables := strings.Split(got, "\n\n")
	if len(tables) != 3 {
		t.Fatalf("want a table per kubelet and the floor, got %d parts:\n%s", len(tables), got)
	}
	for i, want := range []struct {
		table int
		line  string
	}{
		{0, "| benchmark (time per op) | kubelet v1.37.2 | kdm | kubelet / kdm | kdm / floor | floor (`Floor/...`) |"},
		{0, "| A | 300 ns (200 ns..900 ns) | 200 ns (100 ns..300 ns) | 3.00× (1.00×..3.00×) | – | – |"},
		// Only the third round ran the policy variant: 900 / 30.
		{0, "| A (kdm policy=kdm), policy comparison: kdm's device-list writes coalesced in the background against the kubelet's one write per update | 300 ns (200 ns..900 ns) | 30.0 ns (30.0 ns..30.0 ns) | 30.0× (30.0×..30.0×) |"},
		{0, "| B | not run | 6.00 ms (5.00 ms..7.00 ms) | – |"},
		// The v1.36 table pairs each round's kubelet-1.36 with that round's kdm: 600/100, 400/200, 1800/300.
		{1, "| benchmark (time per op) | kubelet v1.36.3 | kdm | kubelet / kdm |"},
		{1, "| A | 600 ns (400 ns..1.80 µs) | 200 ns (100 ns..300 ns) | 6.00× (2.00×..6.00×) |"},
		{1, "| A (kdm policy=kdm), policy comparison"},
		// A kubelet that skipped itself says why.
		{1, "| B | not run: too slow | 6.00 ms (5.00 ms..7.00 ms) | – |"},
		{2, "| Floor/rpc | 3.00 µs (2.00 µs..4.00 µs) | – | – |"},
	} {
		if !strings.Contains(tables[want.table], want.line) {
			t.Errorf("%d: table %d lacks %q:\n%s", i, want.table, want.line, got)
		}
	}
	if strings.Contains(tables[2], "kubelet") {
		t.Errorf("the floor table lists a kubelet's result:\n%s", tables[2])
	}
}

func TestRenderFloorMultiples(t *testing.T) {
	rs := newRounds()
	// Round by round: 900/300 = 3, 1200/300 = 4 and 1000/500 = 2 for Allocate; the reference
	// is listed apart, with no ratio.
	for _, round := range [][4]float64{{900, 300, 2000, 2}, {1200, 300, 3000, 2}, {1000, 500, 3300, 2}} {
		rs.add([]result{
			r("Allocate/pods=1000,departs=oldest/kdm", round[0]),
			{name: "Floor/allocate+entry,pods=1000,departs=oldest", nsPerOp: round[1], metrics: map[string]float64{"written-B/op": 629, "file-MiB": 0.5}},
			r("CheckpointWrite/pods=1000,devices=4/kdm", round[2]),
			{name: "Reference/allocate+wholefile,pods=0", nsPerOp: 1, metrics: map[string]float64{"file-MiB": round[3], "written-B/op": round[3] * (1 << 20)}},
		})
	}
	got := render(rs, []kubelet{{"kubelet-1.37", "v1.37.2"}})
	for _, want := range []string{
		"| Allocate/pods=1000,departs=oldest | not run | 1.00 µs (900 ns..1.20 µs) | – | 3.00× (2.00×..4.00×) | allocate+entry,pods=1000,departs=oldest |",
		// No floor: no ratio.
		"| CheckpointWrite/pods=1000,devices=4 | not run | 3.00 µs (2.00 µs..3.30 µs) | – | – | – |",
		"| floor, same run | time per op | file | overwritten per op |",
		"| Floor/allocate+entry,pods=1000,departs=oldest | 300 ns (300 ns..500 ns) | 512 KiB | 629 B |",
		"| reference, same run (not a lower bound) | time per op | file | overwritten per op |",
		"| Reference/allocate+wholefile,pods=0 | 1.00 ns (1.00 ns..1.00 ns) | 2.00 MiB | 2.00 MiB |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("render lacks %q:\n%s", want, got)
		}
	}
	if floors, _, _ := strings.Cut(got, "| reference,"); strings.Contains(floors, "| Reference/") {
		t.Errorf("a reference is listed among the floors:\n%s", got)
	}
	if strings.Contains(got, "written-B/op") || strings.Contains(got, "file-MiB") {
		t.Errorf("the file metrics are listed again among the other metrics:\n%s", got)
	}
}

func TestFloorFor(t *testing.T) {
	for name, want := range map[string]string{
		"Allocate/pods=0/kdm":                            "Floor/allocate+entry,pods=0",
		"Allocate/pods=10000,departs=random/kdm":         "Floor/allocate+entry,pods=10000,departs=random",
		"AllocateBeside/devices=1000000/kdm":             "Floor/allocate+entry,beside=1000000",
		"ListAndWatchUpdate/devices=87381/kdm":           "Floor/listandwatch+write,devices=87381",
		"ListAndWatchUpdate/devices=1000/kdm,policy=kdm": "Floor/listandwatch,devices=1000",
		"Restart/devices=1000,pods=250/kdm":              "Floor/restart,devices=1000,pods=250",
		// The Checkpoint rows have no lower bound (see BenchmarkFloor).
		"CheckpointEncodeChurn/pods=1000,devices=4/kdm": "",
		"CheckpointWrite/pods=1000,devices=4/kdm":       "",
		"Allocate/pods=0/kubelet-1.37":                  "",
	} {
		if got := floorFor(name); got != want {
			t.Errorf("floorFor(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestAppendKubelets(t *testing.T) {
	ks := appendKubelets(nil, []result{r("A/kubelet-1.37", 1), r("A/kdm", 1), r("B/kubelet-1.37", 1), r("Floor/rpc", 1)}, "v1.37.2")
	ks = appendKubelets(ks, []result{r("A/kubelet-1.36", 1)}, "v1.36.3")
	want := []kubelet{{"kubelet-1.37", "v1.37.2"}, {"kubelet-1.36", "v1.36.3"}}
	if len(ks) != len(want) || ks[0] != want[0] || ks[1] != want[1] {
		t.Errorf("appendKubelets = %v, want %v", ks, want)
	}
}

func TestWithSection(t *testing.T) {
	doc := "# Benchmarks\n\n" + beginMarker + "\nold table\n" + endMarker + "\n\nHow to run.\n"
	got, err := withSection(doc, beginMarker, endMarker, "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Benchmarks\n\n" + beginMarker + "\nnew table\n" + endMarker + "\n\nHow to run.\n"
	if got != want {
		t.Errorf("withSection =\n%s\nwant\n%s", got, want)
	}
	if _, err := withSection("no markers", beginMarker, endMarker, "x"); err == nil {
		t.Error("withSection accepted a document without markers")
	}
}

func TestSplitBench(t *testing.T) {
	for _, c := range []struct{ in, first, rest string }{
		{".", ".", ""},
		{"Allocate/pods=0", "Allocate", "/pods=0"},
		{"^BenchmarkRestart$/./^kdm", "^BenchmarkRestart$", "/./^kdm"},
	} {
		if first, rest := splitBench(c.in); first != c.first || rest != c.rest {
			t.Errorf("splitBench(%q) = %q, %q; want %q, %q", c.in, first, rest, c.first, c.rest)
		}
	}
}

// TestModulesFollowTable: by default the parent module and one module per older kubelet row
// run, newest first, and each pins its row's release: the parent requires the newest row's
// k8s.io/kubernetes, a per-minor module replaces it with its row's. A row without its module,
// or a module left on another release, fails here rather than in a bench-compare run.
func TestModulesFollowTable(t *testing.T) {
	versions := devicemanager.KubeletVersions()
	dirs := defaultModules(versions)
	if len(dirs) != len(versions) || dirs[0] != "." {
		t.Fatalf("defaultModules = %q for %d kubelet rows", dirs, len(versions))
	}
	require := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v\S+)`)
	replace := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes => k8s\.io/kubernetes (v\S+)`)
	for i, dir := range dirs {
		row := versions[len(versions)-1-i]
		gomod, err := os.ReadFile(filepath.Join("../..", dir, "go.mod"))
		if err != nil {
			t.Errorf("%s: %v", row.Name, err)
			continue
		}
		pin := replace.FindSubmatch(gomod)
		if dir == "." {
			pin = require.FindSubmatch(gomod)
		}
		if pin == nil || string(pin[1]) != row.Reference {
			t.Errorf("%s/go.mod does not pin k8s.io/kubernetes %s (%s's release)", dir, row.Reference, row.Name)
		}
	}
	if got := buildArgs("kubelet-x", "/b"); strings.Join(got, " ") != "test -c -tags olderkubelet -ldflags -X "+olderKubeletPackage+".name=kubelet-x -o /b "+olderKubeletPackage {
		t.Errorf("buildArgs of a per-minor module = %q", got)
	}
	if got := buildArgs(".", "/b"); strings.Join(got, " ") != "test -c -o /b ." {
		t.Errorf("buildArgs of the parent = %q", got)
	}
}

// TestFloorPattern checks the pattern that runs the floors of a benchmark's kdm rows right
// after it: each floor once, matched exactly, and nothing for rows without a floor.
func TestFloorPattern(t *testing.T) {
	got := floorPattern([]result{
		r("Allocate/pods=0/kubelet-1.37", 1), r("Allocate/pods=0/kdm", 1),
		r("Allocate/pods=100,departs=newest/kdm", 1), {name: "Allocate/pods=10000,departs=newest/kubelet-1.37", skipped: "not run"},
		r("ListAndWatchUpdate/devices=1000/kdm", 1), r("ListAndWatchUpdate/devices=1000/kdm,policy=kdm", 1),
	})
	want := `^BenchmarkFloor$/^(allocate\+entry,pods=0|allocate\+entry,pods=100,departs=newest|listandwatch\+write,devices=1000|listandwatch,devices=1000)$`
	if got != want {
		t.Errorf("floorPattern = %q, want %q", got, want)
	}
	re := regexp.MustCompile(strings.Split(got, "/")[1])
	for sub, match := range map[string]bool{"allocate+entry,pods=0": true, "allocate+entry,pods=100,departs=newest": true,
		"allocate+entry,pods=1000,departs=newest": false, "allocate+entry,pods=100,departs=oldest": false, "listandwatch,devices=1000": true} {
		if re.MatchString(sub) != match {
			t.Errorf("the pattern matches %q: %v, want %v", sub, !match, match)
		}
	}
	if got := floorPattern([]result{r("CheckpointEncode/pods=1000,devices=4/kdm", 1), r("Allocate/pods=0/kubelet-1.37", 1)}); got != "" {
		t.Errorf("floorPattern of rows without floors = %q, want \"\"", got)
	}
}

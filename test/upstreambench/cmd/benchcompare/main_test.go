package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkAllocate/pods=0/kubelet-1.37-2         	     150	   1470140 ns/op
BenchmarkAllocate/pods=0/kdm-2             	      56	   6576950 ns/op
BenchmarkAllocate/pods=10000/kdm-2         	       1	 136045219 ns/op
BenchmarkCheckpointEncode/pods=1000,devices=4/kubelet-1.36-2 	       1	 155460567 ns/op	46254128 B/op	 1303517 allocs/op
BenchmarkListAndWatchUpdate/devices=1000/kdm,policy=kdm 	      34	   9847389 ns/op
BenchmarkFloor/rpc-2                                    	    3816	     59080 ns/op
PASS
`

func TestParse(t *testing.T) {
	got, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := []result{
		{"Allocate/pods=0/kubelet-1.37", 1470140},
		{"Allocate/pods=0/kdm", 6576950},
		{"Allocate/pods=10000/kdm", 136045219},
		{"CheckpointEncode/pods=1000,devices=4/kubelet-1.36", 155460567},
		{"ListAndWatchUpdate/devices=1000/kdm,policy=kdm", 9847389},
		{"Floor/rpc", 59080},
	}
	if len(got) != len(want) {
		t.Fatalf("parse = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("result %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseFailure(t *testing.T) {
	if _, err := parse(strings.NewReader("--- FAIL: BenchmarkAllocate/pods=0/kdm\nFAIL\n")); err == nil {
		t.Error("parse accepted the output of a failing benchmark")
	}
}

func TestRender(t *testing.T) {
	rs := newRounds()
	// Each round holds the parent binary's results (kubelet-1.37, kdm, floor) and then the
	// kubelet136 binary's (kubelet-1.36 alone).
	rs.add([]result{{"A/kubelet-1.37", 300}, {"A/kdm", 100}, {"B/kdm", 5e6}, {"Floor/rpc", 2000}, {"A/kubelet-1.36", 600}})
	rs.add([]result{{"A/kubelet-1.37", 200}, {"A/kdm", 200}, {"B/kdm", 7e6}, {"Floor/rpc", 4000}, {"A/kubelet-1.36", 400}})
	rs.add([]result{{"A/kubelet-1.37", 900}, {"A/kdm", 300}, {"A/kdm,policy=kdm", 30}, {"Floor/rpc", 3000}, {"A/kubelet-1.36", 1800}})
	got := render(rs, []kubelet{{"kubelet-1.37", "v1.37.2"}, {"kubelet-1.36", "v1.36.3"}})
	tables := strings.Split(got, "\n\n")
	if len(tables) != 3 {
		t.Fatalf("want a table per kubelet and the floor, got %d parts:\n%s", len(tables), got)
	}
	for i, want := range []struct {
		table int
		line  string
	}{
		{0, "| benchmark (time per op) | kubelet v1.37.2 | kdm | kubelet / kdm |"},
		{0, "| A | 300 ns (200 ns..900 ns) | 200 ns (100 ns..300 ns) | 3.00× (1.00×..3.00×) |"},
		// Only the third round ran the policy variant: 900 / 30.
		{0, "| A (kdm policy=kdm) | 300 ns (200 ns..900 ns) | 30.0 ns (30.0 ns..30.0 ns) | 30.0× (30.0×..30.0×) |"},
		{0, "| B | not run | 6.00 ms (5.00 ms..7.00 ms) | – |"},
		// The v1.36 table pairs each round's kubelet-1.36 with that round's kdm: 600/100, 400/200, 1800/300.
		{1, "| benchmark (time per op) | kubelet v1.36.3 | kdm | kubelet / kdm |"},
		{1, "| A | 600 ns (400 ns..1.80 µs) | 200 ns (100 ns..300 ns) | 6.00× (2.00×..6.00×) |"},
		{1, "| A (kdm policy=kdm) | 600 ns (400 ns..1.80 µs) | 30.0 ns (30.0 ns..30.0 ns) | 60.0× (60.0×..60.0×) |"},
		{1, "| B | not run | 6.00 ms (5.00 ms..7.00 ms) | – |"},
		{2, "| Floor/rpc | 3.00 µs (2.00 µs..4.00 µs) |"},
	} {
		if !strings.Contains(tables[want.table], want.line) {
			t.Errorf("%d: table %d lacks %q:\n%s", i, want.table, want.line, got)
		}
	}
	if strings.Contains(tables[2], "kubelet") {
		t.Errorf("the floor table lists a kubelet's result:\n%s", tables[2])
	}
}

func TestAppendKubelets(t *testing.T) {
	ks := appendKubelets(nil, []result{{"A/kubelet-1.37", 1}, {"A/kdm", 1}, {"B/kubelet-1.37", 1}, {"Floor/rpc", 1}}, "v1.37.2")
	ks = appendKubelets(ks, []result{{"A/kubelet-1.36", 1}}, "v1.36.3")
	want := []kubelet{{"kubelet-1.37", "v1.37.2"}, {"kubelet-1.36", "v1.36.3"}}
	if len(ks) != len(want) || ks[0] != want[0] || ks[1] != want[1] {
		t.Errorf("appendKubelets = %v, want %v", ks, want)
	}
}

func TestWithSection(t *testing.T) {
	doc := "# Benchmarks\n\n" + beginMarker + "\nold table\n" + endMarker + "\n\nHow to run.\n"
	got, err := withSection(doc, "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Benchmarks\n\n" + beginMarker + "\nnew table\n" + endMarker + "\n\nHow to run.\n"
	if got != want {
		t.Errorf("withSection =\n%s\nwant\n%s", got, want)
	}
	if _, err := withSection("no markers", "x"); err == nil {
		t.Error("withSection accepted a document without markers")
	}
}

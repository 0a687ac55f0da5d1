package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkAllocate/pods=0/kubelet-2         	     150	   1470140 ns/op
BenchmarkAllocate/pods=0/kdm-2             	      56	   6576950 ns/op
BenchmarkAllocate/pods=10000/kdm-2         	       1	 136045219 ns/op
BenchmarkCheckpointEncode/pods=1000,devices=4/kubelet-2 	       1	 155460567 ns/op	46254128 B/op	 1303517 allocs/op
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
		{"Allocate/pods=0/kubelet", 1470140},
		{"Allocate/pods=0/kdm", 6576950},
		{"Allocate/pods=10000/kdm", 136045219},
		{"CheckpointEncode/pods=1000,devices=4/kubelet", 155460567},
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
	rs.add([]result{{"A/kubelet", 300}, {"A/kdm", 100}, {"B/kdm", 5e6}, {"Floor/rpc", 2000}})
	rs.add([]result{{"A/kubelet", 200}, {"A/kdm", 200}, {"B/kdm", 7e6}, {"Floor/rpc", 4000}})
	rs.add([]result{{"A/kubelet", 900}, {"A/kdm", 300}, {"A/kdm,policy=kdm", 30}, {"Floor/rpc", 3000}})
	got := render(rs, "v1.36.0")
	for _, want := range []string{
		"| A | 300 ns (200 ns..900 ns) | 200 ns (100 ns..300 ns) | 3.00× (1.00×..3.00×) |",
		// Only the third round ran the policy variant: 900 / 30.
		"| A (kdm policy=kdm) | 300 ns (200 ns..900 ns) | 30.0 ns (30.0 ns..30.0 ns) | 30.0× (30.0×..30.0×) |",
		"| B | not run | 6.00 ms (5.00 ms..7.00 ms) | – |",
		"| Floor/rpc | 3.00 µs (2.00 µs..4.00 µs) |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
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

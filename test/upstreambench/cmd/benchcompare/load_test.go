package main

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseLoad(t *testing.T) {
	l, err := parseLoad("0.52 1.21 1.43 1/234 5678\n")
	if err != nil || l.one != 0.52 || l.text != "0.52 1.21 1.43" {
		t.Errorf("parseLoad = %+v, %v; want 0.52 and \"0.52 1.21 1.43\"", l, err)
	}
	for _, bad := range []string{"", "0.5 0.6", "x 1 2 1/2 3", "-1 0 0 1/2 3"} {
		if l, err := parseLoad(bad); err == nil || !math.IsNaN(l.one) {
			t.Errorf("parseLoad(%q) = %+v, %v; want an error and an unknown load", bad, l, err)
		}
	}
}

// loads returns a load reader that gives the figures in turn.
func loads(figures ...float64) func() (load, error) {
	return func() (load, error) {
		if len(figures) == 0 {
			return unknownLoad, errors.New("no more figures")
		}
		f := figures[0]
		figures = figures[1:]
		return load{one: f, text: "x"}, nil
	}
}

// TestLoadGateStart checks that a run whose tables are to be written stops before measuring
// when the load is above the CPU count, naming the figure and the count, unless -loaded.
func TestLoadGateStart(t *testing.T) {
	g := loadGate{read: loads(15), cpus: 2}
	if _, err := g.start(true); err == nil || !strings.Contains(err.Error(), "15.00") || !strings.Contains(err.Error(), "2 CPUs") {
		t.Errorf("start at load 15 on 2 CPUs: %v; want an error naming 15.00 and 2 CPUs", err)
	}
	for _, g := range []loadGate{{read: loads(15), cpus: 2, allowLoaded: true}, {read: loads(2), cpus: 2}} {
		if _, err := g.start(true); err != nil {
			t.Errorf("start with %+v: %v", g, err)
		}
	}
	if _, err := (loadGate{read: loads(15), cpus: 2}).start(false); err != nil {
		t.Errorf("start of a run that writes nothing: %v", err)
	}
	if _, err := (loadGate{read: loads(), cpus: 2}).start(true); err == nil {
		t.Error("start with an unreadable load: no error")
	}
}

// TestLoadGatePublish checks what reaches the document: a quiet run's tables as they are; a
// run loaded before or after it nothing, with an error naming both figures; with -loaded the
// tables headed by the loaded mark.
func TestLoadGatePublish(t *testing.T) {
	const begin, end = "<!-- b -->", "<!-- e -->"
	const doc = "intro\n" + begin + "\nold\n" + end + "\noutro\n"
	for _, tc := range []struct {
		name          string
		before, after float64
		allowLoaded   bool
		wantErr       bool
		wantMark      bool
	}{
		{name: "quiet", before: 1.5, after: 2},
		{name: "loaded before", before: 15, after: 1, wantErr: true},
		{name: "loaded after", before: 1, after: 3.25, wantErr: true},
		{name: "loaded, allowed", before: 15, after: 3.25, allowLoaded: true, wantMark: true},
		{name: "quiet, allowed", before: 1, after: 1, allowLoaded: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "benchmarks.md")
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			g := loadGate{read: loads(tc.before, tc.after), cpus: 2, allowLoaded: tc.allowLoaded}
			before, err := g.start(false)
			if err != nil {
				t.Fatal(err)
			}
			err = g.publish(path, begin, end, before, g.end(), "new\n")
			got, rerr := os.ReadFile(path)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if tc.wantErr {
				if err == nil {
					t.Fatal("a loaded run was written")
				}
				for _, want := range []string{figure(load{one: tc.before}), figure(load{one: tc.after}), "2 CPUs", "-loaded"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the error %q does not name %q", err, want)
					}
				}
				if string(got) != doc {
					t.Errorf("the document changed:\n%s", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(got), "new\n"+end) {
				t.Errorf("the tables were not written:\n%s", got)
			}
			if mark := strings.Contains(string(got), loadedMark); mark != tc.wantMark {
				t.Errorf("loaded mark in the document: %v, want %v:\n%s", mark, tc.wantMark, got)
			}
		})
	}
}

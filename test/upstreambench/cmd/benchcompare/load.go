package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// load is the system's load average.
type load struct {
	one  float64 // the 1-minute average; NaN when unknown
	text string  // the 1, 5 and 15-minute averages as uptime prints them, or "unknown"
}

// unknownLoad is the load when it cannot be read.
var unknownLoad = load{one: math.NaN(), text: "unknown"}

// readLoad reads the load average from /proc/loadavg.
func readLoad() (load, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return unknownLoad, err
	}
	return parseLoad(string(b))
}

// parseLoad parses the content of /proc/loadavg ("0.52 1.21 1.43 1/234 5678").
func parseLoad(s string) (load, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return unknownLoad, fmt.Errorf("load average %q: want three figures", s)
	}
	one, err := strconv.ParseFloat(f[0], 64)
	if err != nil || one < 0 {
		return unknownLoad, fmt.Errorf("load average %q: the 1-minute figure %q is not a number", s, f[0])
	}
	return load{one: one, text: strings.Join(f[:3], " ")}, nil
}

// loadGate decides whether the tables of a run may replace a section of a document: only
// when the 1-minute load average before and after the run is at most the CPU count, since
// other work competing for the CPUs moves every figure, or, with allowLoaded, marked as
// loaded.
type loadGate struct {
	read        func() (load, error)
	cpus        int
	allowLoaded bool
}

// loadedMark heads the tables of a run whose load was above the CPU count.
const loadedMark = "LOADED: not a quiet run"

// quiet reports whether l is known and at most the CPU count.
func (g loadGate) quiet(l load) bool { return !math.IsNaN(l.one) && l.one <= float64(g.cpus) }

// start reads the load before a run. When the run's tables are to be written (writing) and a
// loaded run may not be, a load above the CPU count (or one that cannot be read) is an error
// at once, before minutes of measuring.
func (g loadGate) start(writing bool) (load, error) {
	l, err := g.read()
	if err != nil {
		l = unknownLoad
	}
	if !writing || g.allowLoaded || g.quiet(l) {
		return l, nil
	}
	const advice = "run on a quiet machine, or pass -loaded to write the tables marked %q"
	if err != nil {
		return l, fmt.Errorf("cannot read the load average before the run (%w): "+advice, err, loadedMark)
	}
	return l, fmt.Errorf("the 1-minute load average before the run is %s, above the %d CPUs: other work competes for them; "+advice,
		figure(l), g.cpus, loadedMark)
}

// end reads the load after a run.
func (g loadGate) end() load {
	l, err := g.read()
	if err != nil {
		return unknownLoad
	}
	return l
}

// mark returns the line that heads the tables of a run with the loads before and after it:
// "" for a quiet run, the loaded mark with both figures otherwise.
func (g loadGate) mark(before, after load) string {
	if g.quiet(before) && g.quiet(after) {
		return ""
	}
	return fmt.Sprintf("**%s**: the 1-minute load average was %s before and %s after, on %d CPUs; other work competed for them, and these figures are not a measurement to quote.\n\n",
		loadedMark, figure(before), figure(after), g.cpus)
}

// admit returns an error, naming both figures, when tables measured with the loads before
// and after may not be written to path.
func (g loadGate) admit(path string, before, after load) error {
	if g.allowLoaded || g.mark(before, after) == "" {
		return nil
	}
	return fmt.Errorf("not writing %s: the 1-minute load average was %s before the run and %s after, and %d CPUs: "+
		"above the CPU count, other work competed for them; rerun on a quiet machine, or pass -loaded to write the tables marked %q",
		path, figure(before), figure(after), g.cpus, loadedMark)
}

// figure is l's 1-minute average, or "unknown".
func figure(l load) string {
	if math.IsNaN(l.one) {
		return "unknown"
	}
	return strconv.FormatFloat(l.one, 'f', 2, 64)
}

// publish prints section, headed by the loaded mark if the run was loaded, and, when path is
// not empty and the gate admits the run, puts it between begin and end in path.
func (g loadGate) publish(path, begin, end string, before, after load, section string) error {
	section = g.mark(before, after) + section
	fmt.Print(section)
	if path == "" {
		return nil
	}
	if err := g.admit(path, before, after); err != nil {
		return err
	}
	return replaceSection(path, begin, end, section)
}

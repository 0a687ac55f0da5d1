package main

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
)

// series are one benchmark's ns/op, one value per round in which it ran.
type series []float64

// summary is the median and the range of a series.
type summary struct{ median, min, max float64 }

func (s series) summary() summary {
	v := slices.Clone(s)
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return summary{median: med, min: v[0], max: v[len(v)-1]}
}

// rounds holds every round's results by benchmark name, names in first-seen order.
type rounds struct {
	names  []string
	values map[string][]float64 // per name, one entry per round, NaN where it did not run
	n      int
	// metrics are the other values reported, per name and unit, one per round it ran.
	metrics map[string]map[string][]float64
	// units are the metrics' units per name, in first-seen order.
	units map[string][]string
	// skipped are the reasons of the benchmarks that skipped themselves, by name.
	skipped map[string]string
}

func newRounds() *rounds {
	return &rounds{values: map[string][]float64{}, metrics: map[string]map[string][]float64{}, units: map[string][]string{}, skipped: map[string]string{}}
}

// add records one round's results.
func (r *rounds) add(results []result) {
	for _, res := range results {
		if res.skipped != "" {
			r.skipped[res.name] = res.skipped
			continue
		}
		for _, unit := range slices.Sorted(maps.Keys(res.metrics)) {
			if r.metrics[res.name] == nil {
				r.metrics[res.name] = map[string][]float64{}
			}
			if _, ok := r.metrics[res.name][unit]; !ok {
				r.units[res.name] = append(r.units[res.name], unit)
			}
			r.metrics[res.name][unit] = append(r.metrics[res.name][unit], res.metrics[unit])
		}
		v, ok := r.values[res.name]
		if !ok {
			r.names = append(r.names, res.name)
			v = make([]float64, r.n)
			for i := range v {
				v[i] = math.NaN()
			}
		}
		r.values[res.name] = append(v, res.nsPerOp)
	}
	r.n++
	for name, v := range r.values {
		if len(v) < r.n {
			r.values[name] = append(v, math.NaN())
		}
	}
}

// series returns name's values in the rounds it ran.
func (r *rounds) series(name string) series {
	var s series
	for _, v := range r.values[name] {
		if !math.IsNaN(v) {
			s = append(s, v)
		}
	}
	return s
}

// ratios returns, for every round in which both ran, kubelet's value over kdm's.
func (r *rounds) ratios(kubelet, kdm string) series {
	return ratiosOf(r.values[kubelet], r.values[kdm])
}

// ratiosOf returns a[i]/b[i] for every round in which both have a value.
func ratiosOf(a, b []float64) series {
	var s series
	for i := range a {
		if i < len(b) && !math.IsNaN(a[i]) && !math.IsNaN(b[i]) {
			s = append(s, a[i]/b[i])
		}
	}
	return s
}

// floorRules give each kdm row its floor (see BenchmarkFloor): the Floor benchmark named by
// expanding floor with the row's name's submatches. A row no rule matches has no floor.
var floorRules = []struct {
	row   *regexp.Regexp // matches the kdm sub-benchmark's name
	floor string
}{
	{regexp.MustCompile(`^Allocate/(pods=\d+(?:,departs=\w+)?)/kdm$`), "Floor/allocate+entry,$1"},
	{regexp.MustCompile(`^AllocateBeside/devices=(\d+)/kdm$`), "Floor/allocate+entry,beside=$1"},
	{regexp.MustCompile(`^ListAndWatchUpdate/devices=(\d+)/kdm$`), "Floor/listandwatch+write,devices=$1"},
	{regexp.MustCompile(`^ListAndWatchUpdate/devices=(\d+)/kdm,policy=kdm$`), "Floor/listandwatch,devices=$1"},
	{regexp.MustCompile(`^Restart/(.+)/kdm$`), "Floor/restart,$1"},
}

// floorFor returns the floor benchmark of the kdm sub-benchmark kdm, "" if it has none.
func floorFor(kdm string) string {
	for _, rule := range floorRules {
		if m := rule.row.FindStringSubmatchIndex(kdm); m != nil {
			return string(rule.row.ExpandString(nil, rule.floor, kdm, m))
		}
	}
	return ""
}

// variantLabels say what a kdm variant's row compares, where it is not the same work.
var variantLabels = map[string]string{
	"policy=kdm": "policy comparison: kdm's device-list writes coalesced in the background against the kubelet's one write per update",
}

// kubelet is one kubelet release under comparison: the last element of its sub-benchmarks'
// names (its policy name) and the k8s.io/kubernetes version they ran.
type kubelet struct{ side, version string }

// isKubelet reports whether a sub-benchmark's last name element is a kubelet's.
func isKubelet(side string) bool { return strings.HasPrefix(side, "kubelet") }

// appendKubelets adds to ks the kubelet sides of results not already in it, as version.
func appendKubelets(ks []kubelet, results []result, version string) []kubelet {
	for _, res := range results {
		side := res.name[strings.LastIndex(res.name, "/")+1:]
		if !isKubelet(side) || slices.ContainsFunc(ks, func(k kubelet) bool { return k.side == side }) {
			continue
		}
		ks = append(ks, kubelet{side: side, version: version})
	}
	return ks
}

// row is one line of a comparison table.
type row struct {
	label        string
	prefix       string // the benchmark's name without its side
	kubelet, kdm string // benchmark names; kubelet is empty for kdm-only rows
}

// comparisonRows pairs every kdm sub-benchmark ("<prefix>/kdm" or "<prefix>/kdm,<variant>")
// with its sibling "<prefix>/<kubeletSide>". Names that are neither kdm's nor a kubelet's
// (the floor) are returned apart.
func comparisonRows(names []string, kubeletSide string) (rows []row, other []string) {
	has := map[string]bool{}
	for _, n := range names {
		has[n] = true
	}
	for _, n := range names {
		i := strings.LastIndex(n, "/")
		if i < 0 {
			other = append(other, n)
			continue
		}
		prefix, side := n[:i], n[i+1:]
		switch {
		case isKubelet(side):
		case side == "kdm" || strings.HasPrefix(side, "kdm,"):
			label := prefix
			if variant, ok := strings.CutPrefix(side, "kdm,"); ok {
				label += " (kdm " + variant + ")"
				if what, ok := variantLabels[variant]; ok {
					label += ", " + what
				}
			}
			k := prefix + "/" + kubeletSide
			if !has[k] {
				k = ""
			}
			rows = append(rows, row{label: label, prefix: prefix, kubelet: k, kdm: n})
		default:
			other = append(other, n)
		}
	}
	return rows, other
}

// render writes one comparison table per kubelet, in the order given, the floor table, the
// reference table and the table of other metrics, in Markdown.
func render(r *rounds, kubelets []kubelet) string {
	var b strings.Builder
	var other []string
	for i, k := range kubelets {
		var rows []row
		rows, other = comparisonRows(r.names, k.side)
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "| benchmark (time per op) | kubelet %s | kdm | kubelet / kdm | kdm / floor | floor (`Floor/...`) |\n|---|---:|---:|---:|---:|---|\n", k.version)
		for _, rw := range rows {
			kub, ratio := "not run", "–"
			if rw.kubelet != "" {
				kub = formatTimes(r.series(rw.kubelet).summary())
				if rs := r.ratios(rw.kubelet, rw.kdm); len(rs) > 0 {
					ratio = formatRatio(rs.summary())
				}
			} else if why := r.skipped[rw.prefix+"/"+k.side]; why != "" {
				kub = why
			}
			fl, flName := "–", "–"
			if name := floorFor(rw.kdm); name != "" {
				flName = strings.TrimPrefix(name, "Floor/")
				if rs := r.ratios(rw.kdm, name); len(rs) > 0 {
					fl = formatRatio(rs.summary())
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", rw.label, kub, formatTimes(r.series(rw.kdm).summary()), ratio, fl, flName)
		}
	}
	if len(kubelets) == 0 {
		_, other = comparisonRows(r.names, "")
	}
	var floors, refs []string
	for _, n := range other {
		if strings.HasPrefix(n, "Reference/") {
			refs = append(refs, n)
		} else {
			floors = append(floors, n)
		}
	}
	writeFileTable(&b, r, "floor, same run", floors)
	writeFileTable(&b, r, "reference, same run (not a lower bound)", refs)
	var metricRows []string
	for _, n := range r.names {
		for _, unit := range r.units[n] {
			if fileUnits[unit] {
				continue
			}
			metricRows = append(metricRows, fmt.Sprintf("| %s | %s | %s |\n", n, unit, formatPlain(series(r.metrics[n][unit]).summary())))
		}
	}
	if len(metricRows) > 0 {
		b.WriteString("\n| benchmark | also reported | median (min..max) |\n|---|---|---:|\n")
		for _, l := range metricRows {
			b.WriteString(l)
		}
	}
	return b.String()
}

// fileUnits are the metrics the floor and reference tables show in their own columns.
var fileUnits = map[string]bool{"file-MiB": true, "written-B/op": true}

// writeFileTable writes a table, headed heading, of the benchmarks names: their times, the
// size of the checkpoint file they write and how much of it an op overwrites.
func writeFileTable(b *strings.Builder, r *rounds, heading string, names []string) {
	if len(names) == 0 {
		return
	}
	fmt.Fprintf(b, "\n| %s | time per op | file | overwritten per op |\n|---|---:|---:|---:|\n", heading)
	for _, n := range names {
		file, written := "–", "–"
		if v := r.metrics[n]["file-MiB"]; len(v) > 0 {
			file = mib(series(v).summary().median)
		}
		if v := r.metrics[n]["written-B/op"]; len(v) > 0 {
			written = bytesSize(series(v).summary().median)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", n, formatTimes(r.series(n).summary()), file, written)
	}
}

// bytesSize prints a byte count with three significant digits in a readable unit.
func bytesSize(x float64) string {
	if x < 1024 {
		return fmt.Sprintf("%.0f B", x)
	}
	return mib(x / (1 << 20))
}

func mib(x float64) string {
	if x < 1 {
		return sig3(x*1024) + " KiB"
	}
	return sig3(x) + " MiB"
}

func formatPlain(s summary) string {
	return fmt.Sprintf("%s (%s..%s)", sig3(s.median), sig3(s.min), sig3(s.max))
}

func formatTimes(s summary) string {
	return fmt.Sprintf("%s (%s..%s)", duration(s.median), duration(s.min), duration(s.max))
}

func formatRatio(s summary) string {
	return fmt.Sprintf("%s (%s..%s)", ratio(s.median), ratio(s.min), ratio(s.max))
}

// duration prints ns with three significant digits in a readable unit.
func duration(ns float64) string {
	switch {
	case ns < 1e3:
		return sig3(ns) + " ns"
	case ns < 1e6:
		return sig3(ns/1e3) + " µs"
	case ns < 1e9:
		return sig3(ns/1e6) + " ms"
	default:
		return sig3(ns/1e9) + " s"
	}
}

func ratio(x float64) string { return sig3(x) + "×" }

func sig3(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

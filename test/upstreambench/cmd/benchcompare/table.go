package main

import (
	"fmt"
	"math"
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
}

func newRounds() *rounds { return &rounds{values: map[string][]float64{}} }

// add records one round's results.
func (r *rounds) add(results []result) {
	for _, res := range results {
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
	var s series
	a, b := r.values[kubelet], r.values[kdm]
	for i := range a {
		if i < len(b) && !math.IsNaN(a[i]) && !math.IsNaN(b[i]) {
			s = append(s, a[i]/b[i])
		}
	}
	return s
}

// kubelet is one kubelet release under comparison: the last element of its sub-benchmarks'
// names ("kubelet-1.37") and the k8s.io/kubernetes version they ran.
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
			}
			k := prefix + "/" + kubeletSide
			if !has[k] {
				k = ""
			}
			rows = append(rows, row{label: label, kubelet: k, kdm: n})
		default:
			other = append(other, n)
		}
	}
	return rows, other
}

// render writes one comparison table per kubelet, in the order given, and the floor table,
// in Markdown.
func render(r *rounds, kubelets []kubelet) string {
	var b strings.Builder
	var other []string
	for i, k := range kubelets {
		var rows []row
		rows, other = comparisonRows(r.names, k.side)
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "| benchmark (time per op) | kubelet %s | kdm | kubelet / kdm |\n|---|---:|---:|---:|\n", k.version)
		for _, rw := range rows {
			kub, ratio := "not run", "–"
			if rw.kubelet != "" {
				kub = formatTimes(r.series(rw.kubelet).summary())
				if rs := r.ratios(rw.kubelet, rw.kdm); len(rs) > 0 {
					ratio = formatRatio(rs.summary())
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", rw.label, kub, formatTimes(r.series(rw.kdm).summary()), ratio)
		}
	}
	if len(kubelets) == 0 {
		_, other = comparisonRows(r.names, "")
	}
	if len(other) > 0 {
		b.WriteString("\n| floor, same run | time per op |\n|---|---:|\n")
		for _, n := range other {
			fmt.Fprintf(&b, "| %s | %s |\n", n, formatTimes(r.series(n).summary()))
		}
	}
	return b.String()
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

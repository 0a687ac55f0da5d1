package fleet

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
)

// Colours and layout of the charts, in the palette of the scenario SVGs.
const (
	colourLine   = "#1f6feb"
	colourFault  = "#cf222e"
	colourSteady = "#2da44e"
	colourAxis   = "#57606a"
	chartW       = 900
	chartH       = 220
	chartLeft    = 70
	chartTop     = 50
	chartBottom  = 40
)

// point is one value of a series at a time since the sampler started.
type point struct {
	at time.Duration
	v  float64
}

// renderChart draws one series over time against a labelled y axis, with each Mark as a
// shaded band named above it (faults red, the steady window green). The result is a
// self-contained SVG a browser opens.
func renderChart(w io.Writer, title, unit string, pts []point, marks []Mark) error {
	end := time.Second
	peak := 1.0
	for _, p := range pts {
		end = max(end, p.at)
		peak = max(peak, p.v)
	}
	step := niceStep(peak)
	top := math.Ceil(peak/step) * step
	plotW, plotH := float64(chartW-chartLeft-20), float64(chartH)
	x := func(d time.Duration) float64 { return chartLeft + plotW*d.Seconds()/end.Seconds() }
	y := func(v float64) float64 { return chartTop + plotH - plotH*v/top }
	var b strings.Builder
	height := chartTop + chartH + chartBottom
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", chartW, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="16" font-size="13" font-weight="bold">%s</text>`+"\n", chartLeft, html.EscapeString(title))
	for i, m := range marks {
		e := m.End
		if e < 0 {
			e = end
		}
		colour := colourFault
		if m.Name == "steady window" {
			colour = colourSteady
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="0.15"/>`+"\n",
			x(m.Start), chartTop, max(2, x(e)-x(m.Start)), chartH, colour)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="%s">%s</text>`+"\n", x(m.Start)+2, chartTop-4-10*(i%2), colour, html.EscapeString(m.Name))
	}
	for v := 0.0; v <= top+step/2; v += step {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#d0d7de"/><text x="%d" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n",
			chartLeft, chartW-20, y(v), y(v), chartLeft-6, y(v)+4, colourAxis, trimFloat(v))
	}
	tick := niceStep(end.Seconds())
	for s := 0.0; s <= end.Seconds(); s += tick {
		px := x(time.Duration(s * float64(time.Second)))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s"/><text x="%.1f" y="%d" text-anchor="middle" fill="%s">%ss</text>`+"\n",
			px, px, chartTop+chartH, chartTop+chartH+4, colourAxis, px, chartTop+chartH+16, colourAxis, trimFloat(s))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s; seconds since the workload was created</text>`+"\n", chartLeft, chartTop+chartH+32, colourAxis, html.EscapeString(unit))
	var path strings.Builder
	for i, p := range pts {
		cmd := "L"
		if i == 0 {
			cmd = "M"
		}
		fmt.Fprintf(&path, "%s%.1f,%.1f ", cmd, x(p.at), y(p.v))
	}
	fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", strings.TrimSpace(path.String()), colourLine)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceStep is a 1, 2 or 5 times a power of ten that divides peak into at most six steps.
func niceStep(peak float64) float64 {
	if peak <= 0 {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(peak/6)))
	for _, m := range []float64{1, 2, 5, 10} {
		if peak/(m*mag) <= 6 {
			return m * mag
		}
	}
	return 10 * mag
}

func trimFloat(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

// requestRate turns the samples' cumulative request counts into requests per second. The
// counter restarts with the apiserver: a fall counts the new value as the rise.
func requestRate(samples []Sample) []point {
	var out []point
	var prev *Sample
	for i := range samples {
		s := &samples[i]
		if s.Requests < 0 {
			continue
		}
		if prev != nil {
			d := s.Requests - prev.Requests
			if d < 0 {
				d = s.Requests
			}
			out = append(out, point{at: s.At, v: d / (s.At - prev.At).Seconds()})
		}
		prev = s
	}
	return out
}

func runningSeries(samples []Sample) []point {
	out := make([]point, len(samples))
	for i, s := range samples {
		out[i] = point{at: s.At, v: float64(s.Running)}
	}
	return out
}

package scenario

import (
	"fmt"
	"html"
	"io"
	"sort"
	"strings"
)

// RenderSVG draws the timelines of one script side by side: for each resource and policy a
// lane with capacity (grey) and allocatable (blue) after every command, and markers for
// restarts, reboots, plugin events (dashed lines), admissions (green) and rejections (red).
// The result is a self-contained SVG a browser opens.
func RenderSVG(w io.Writer, timelines ...*Timeline) error {
	resources := map[string]bool{}
	steps := 0
	var peak int64 = 1
	for _, tl := range timelines {
		steps = max(steps, len(tl.Steps))
		for _, st := range tl.Steps {
			for res, c := range st.Counts {
				resources[res] = true
				peak = max(peak, c[0], c[1])
			}
		}
	}
	var names []string
	for r := range resources {
		names = append(names, r)
	}
	sort.Strings(names)
	const left, stepW, laneH, gap, top = 170, 64, 110, 30, 60
	width := left + stepW*max(steps, 1) + 40
	height := top + len(timelines)*len(names)*(laneH+gap) + 220
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := "kdm scenario"
	if len(timelines) > 0 {
		title = "kdm scenario: " + timelines[0].Script
	}
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="10" y="42"><tspan fill="#888">&#9632; capacity</tspan>  <tspan fill="#1f6feb">&#9632; allocatable</tspan>  <tspan fill="#2da44e">&#9679; admitted</tspan>  <tspan fill="#cf222e">&#9679; rejected</tspan>  <tspan fill="#bf8700">&#9679; waiting</tspan></text>`+"\n")
	y := top
	for _, tl := range timelines {
		for _, res := range names {
			fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y+16, html.EscapeString(tl.Policy))
			fmt.Fprintf(&b, `<text x="10" y="%d">%s</text>`+"\n", y+32, html.EscapeString(res))
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#f6f8fa" stroke="#d0d7de"/>`+"\n", left, y, stepW*max(steps, 1), laneH)
			scale := func(v int64) int { return y + laneH - 8 - int(float64(laneH-16)*float64(max(v, 0))/float64(peak)) }
			for k, series := range []struct {
				color string
				idx   int
			}{{"#888", 0}, {"#1f6feb", 1}} {
				var pts []string
				for i, st := range tl.Steps {
					c, ok := st.Counts[res]
					if !ok || c[series.idx] < 0 {
						continue
					}
					x := left + i*stepW + stepW/2
					pts = append(pts, fmt.Sprintf("%d,%d %d,%d", x-stepW/2, scale(c[series.idx]), x+stepW/2, scale(c[series.idx])))
				}
				if len(pts) > 0 {
					fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%d" points="%s"/>`+"\n", series.color, 3-k, strings.Join(pts, " "))
				}
			}
			for i, st := range tl.Steps {
				x := left + i*stepW + stepW/2
				for j, l := range st.Lines {
					color := ""
					switch {
					case strings.Contains(l, " rejected"):
						color = "#cf222e"
					case strings.Contains(l, " waiting for its device plugin"):
						color = "#bf8700"
					case strings.HasSuffix(l, " admitted") || strings.Contains(l, " admitted after"):
						color = "#2da44e"
					}
					if color != "" {
						fmt.Fprintf(&b, `<circle cx="%d" cy="%d" r="4" fill="%s"><title>%s</title></circle>`+"\n", x-12+6*(j%5), y+10, color, html.EscapeString(l))
					}
				}
				if marker(st.Command) {
					fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#57606a" stroke-dasharray="3,3"/>`+"\n", x-stepW/2, y, x-stepW/2, y+laneH)
				}
			}
			y += laneH + gap
		}
	}
	// The commands, numbered along the x axis.
	for i := 0; i < steps; i++ {
		cmd := ""
		for _, tl := range timelines {
			if i < len(tl.Steps) {
				cmd = tl.Steps[i].Command
			}
		}
		x := left + i*stepW + stepW/2
		fmt.Fprintf(&b, `<text x="%d" y="%d" transform="rotate(45 %d %d)">%d. %s</text>`+"\n", x, y+4, x, y+4, i+1, html.EscapeString(cmd))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// marker reports whether a command deserves a vertical marker.
func marker(cmd string) bool {
	for _, p := range []string{"kubelet restart", "node reboot", "plugin", "advance", "checkpoint corrupt", "checkpoint legacy"} {
		if strings.HasPrefix(cmd, p) {
			return true
		}
	}
	return false
}

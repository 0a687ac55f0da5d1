package scenario

import (
	"fmt"
	"html"
	"io"
	"sort"
	"strings"
)

// Colours of the SVG; the legend uses the same ones.
const (
	colourCapacity    = "#57606a"
	colourAllocatable = "#1f6feb"
	colourAdmitted    = "#2da44e"
	colourRejected    = "#cf222e"
	colourWaiting     = "#bf8700"
	colourMarker      = "#8c959f"
)

// Layout of the SVG, in pixels.
const (
	svgLeft     = 190 // lane titles and y-axis values
	svgStepW    = 72  // one command
	svgPlotH    = 100 // the capacity / allocatable plot of one lane
	svgEventRow = 14  // one labelled pod dot above the plot
	svgLaneGap  = 26
	svgCharW    = 5.8 // the average width of an 11 px sans-serif character, rounded up
)

// podEvent is an admission outcome found in a step's output, drawn as a labelled dot.
type podEvent struct {
	pod, line, colour string
}

// eventOf classifies one output line: a pod admitted (at once or after waiting for its plugin),
// rejected, or waiting for its plugin. Other lines are no events.
func eventOf(line string) (podEvent, bool) {
	pod, _, _ := strings.Cut(line, " ")
	colour := ""
	switch {
	case strings.Contains(line, " admitted after "), strings.HasSuffix(line, " admitted"):
		colour = colourAdmitted
	case strings.Contains(line, " rejected"):
		colour = colourRejected
	case strings.Contains(line, " waiting for its device plugin"):
		colour = colourWaiting
	default:
		return podEvent{}, false
	}
	return podEvent{pod: pod, line: line, colour: colour}, true
}

// RenderSVG draws the timelines of one script one above the other: for each policy and resource a
// lane whose plot shows capacity (grey, dashed, drawn over) and allocatable (blue) after every
// command against a labelled y axis, with a row of dots above it naming the pods admitted (green,
// whether at once or after waiting), rejected (red) or left waiting (amber), and dashed vertical
// markers before restarts, reboots, plugin and clock events. The commands are numbered along the x
// axis and a legend explains the marks. The result is a self-contained SVG a browser opens.
func RenderSVG(w io.Writer, timelines ...*Timeline) error {
	resources := map[string]bool{}
	steps := 1
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

	minWidth := svgLeft + svgStepW*steps + 30
	var body strings.Builder
	fmt.Fprintf(&body, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := "kdm scenario"
	if len(timelines) > 0 {
		title = "kdm scenario: " + timelines[0].Script
	}
	fmt.Fprintf(&body, `<text x="10" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
	y := drawLegend(&body, 10, 46, minWidth-10) + 22
	for _, tl := range timelines {
		for _, res := range names {
			y = drawLane(&body, tl, res, y, steps, peak) + svgLaneGap
		}
	}
	width, height := drawCommands(&body, timelines, steps, y-svgLaneGap+8)
	width = max(width, minWidth)

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	b.WriteString(body.String())
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// drawLegend writes the legend explaining every mark, starting at (x, y) and wrapping before
// right, and returns the y of its last row.
func drawLegend(b *strings.Builder, x, y, right int) int {
	fmt.Fprintf(b, `<g id="legend">`+"\n")
	left := x
	item := func(swatch, label string) {
		w := 24 + int(svgCharW*float64(len(label))) + 18
		if x > left && x+w-18 > right {
			x, y = left, y+18
		}
		fmt.Fprintf(b, swatch+"\n", x, y)
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", x+24, y+4, label)
		x += w
	}
	line := func(colour, dash string, width int) string {
		return `<g transform="translate(%d,%d)"><line x1="0" y1="0" x2="18" y2="0" stroke="` + colour +
			`" stroke-width="` + fmt.Sprint(width) + `"` + dash + `/></g>`
	}
	dot := func(colour string) string {
		return `<g transform="translate(%d,%d)"><circle cx="9" cy="0" r="4" fill="` + colour + `"/></g>`
	}
	item(line(colourCapacity, ` stroke-dasharray="6,4"`, 2), "capacity")
	item(line(colourAllocatable, "", 3), "allocatable")
	item(dot(colourAdmitted), "admitted (at once or after waiting)")
	item(dot(colourRejected), "rejected")
	item(dot(colourWaiting), "waiting for its plugin")
	item(`<g transform="translate(%d,%d)"><line x1="9" y1="-7" x2="9" y2="7" stroke="`+colourMarker+`" stroke-dasharray="3,3"/></g>`,
		"restart, plugin or clock event")
	fmt.Fprintf(b, "</g>\n")
	return y
}

// drawLane draws one policy's lane for one resource with its top at y and returns its bottom.
func drawLane(b *strings.Builder, tl *Timeline, res string, y, steps int, peak int64) int {
	events := make([][]podEvent, len(tl.Steps))
	rows := 1
	for i, st := range tl.Steps {
		for _, l := range st.Lines {
			if ev, ok := eventOf(l); ok {
				events[i] = append(events[i], ev)
			}
		}
		rows = max(rows, len(events[i]))
	}
	plotTop := y + rows*svgEventRow + 6
	plotW := svgStepW * steps
	fmt.Fprintf(b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", plotTop+12, html.EscapeString(tl.Policy))
	fmt.Fprintf(b, `<text x="10" y="%d">%s</text>`+"\n", plotTop+28, html.EscapeString(res))
	fmt.Fprintf(b, `<text x="10" y="%d" fill="#57606a">devices</text>`+"\n", plotTop+44)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#f6f8fa" stroke="#d0d7de"/>`+"\n", svgLeft, plotTop, plotW, svgPlotH)
	scale := func(v int64) int {
		return plotTop + svgPlotH - 8 - int(float64(svgPlotH-16)*float64(max(v, 0))/float64(peak))
	}
	// The y axis: grid lines and values.
	for v := int64(0); v <= peak; v += tickStep(peak) {
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#d8dee4" stroke-width="0.5"/>`+"\n", svgLeft, scale(v), svgLeft+plotW, scale(v))
		fmt.Fprintf(b, `<text class="tick" x="%d" y="%d" text-anchor="end">%d</text>`+"\n", svgLeft-6, scale(v)+4, v)
	}
	// Allocatable first, capacity dashed on top of it so that equal values show both colours.
	for _, s := range []struct {
		class, attrs string
		idx          int
	}{
		{"allocatable", `stroke="` + colourAllocatable + `" stroke-width="3"`, 1},
		{"capacity", `stroke="` + colourCapacity + `" stroke-width="2" stroke-dasharray="6,4"`, 0},
	} {
		var pts []string
		for i, st := range tl.Steps {
			c, ok := st.Counts[res]
			if !ok || c[s.idx] < 0 {
				continue
			}
			x := svgLeft + i*svgStepW
			pts = append(pts, fmt.Sprintf("%d,%d %d,%d", x, scale(c[s.idx]), x+svgStepW, scale(c[s.idx])))
		}
		if len(pts) > 0 {
			fmt.Fprintf(b, `<polyline class="%s" fill="none" %s points="%s"/>`+"\n", s.class, s.attrs, strings.Join(pts, " "))
		}
	}
	for i, st := range tl.Steps {
		x := svgLeft + i*svgStepW
		if marker(st.Command) {
			fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-dasharray="3,3"/>`+"\n", x, y, x, plotTop+svgPlotH, colourMarker)
		}
		for j, ev := range events[i] {
			cy := y + j*svgEventRow + 7
			fmt.Fprintf(b, `<circle cx="%d" cy="%d" r="4" fill="%s"><title>%s</title></circle>`+"\n", x+10, cy, ev.colour, html.EscapeString(ev.line))
			fmt.Fprintf(b, `<text class="pod" x="%d" y="%d" font-size="10">%s</text>`+"\n", x+17, cy+4, html.EscapeString(abbreviateLabel(ev.pod, svgStepW-20)))
		}
	}
	return plotTop + svgPlotH
}

// drawCommands numbers the commands along the x axis below the last lane, slanted so long ones
// do not overlap, and returns the right and bottom edges of the labels plus a small margin.
func drawCommands(b *strings.Builder, timelines []*Timeline, steps, y int) (right, bottom int) {
	longest := 0
	for i := 0; i < steps; i++ {
		cmd := ""
		for _, tl := range timelines {
			if i < len(tl.Steps) {
				cmd = tl.Steps[i].Command
			}
		}
		label := fmt.Sprintf("%d. %s", i+1, cmd)
		longest = max(longest, slanted(label))
		x := svgLeft + i*svgStepW + svgStepW/2
		// A label slanted at 45 degrees reaches right and down by its length times sin 45°.
		right = max(right, x+slanted(label)+12)
		fmt.Fprintf(b, `<text class="command" x="%d" y="%d" transform="rotate(45 %d %d)">%s</text>`+"\n", x, y+4, x, y+4, html.EscapeString(label))
	}
	return right, y + 4 + longest + 16
}

// slanted is how far a label rotated by 45 degrees reaches right (and down), in pixels.
func slanted(label string) int { return int(float64(len(label)) * svgCharW * 0.71) }

// tickStep returns a step of 1, 2 or 5 times a power of ten giving at most five y-axis values
// from 0 to peak.
func tickStep(peak int64) int64 {
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if peak/(m*p) <= 4 {
				return m * p
			}
		}
	}
}

// abbreviateLabel shortens a pod name to what fits in px pixels beside its dot.
func abbreviateLabel(s string, px int) string {
	n := int(float64(px) / (svgCharW - 0.5))
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:max(n-1, 1)]) + "…"
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

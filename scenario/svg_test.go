package scenario

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// waitStory is a hand-made timeline: a plugin with two devices stops, p1 waits for it, the plugin
// comes back and p1 is admitted after waiting; p2 is rejected.
func waitStory() *Timeline {
	gpu := "example.com/gpu"
	return &Timeline{Policy: "kdm", Script: "wait.txt", Steps: []Step{
		{Command: "kubelet start", Lines: []string{"kdm started"}, Counts: map[string][2]int64{}},
		{Command: "plugin start gpu devices=2", Lines: []string{"example.com/gpu registered with 2 devices"}, Counts: map[string][2]int64{gpu: {2, 2}}},
		{Command: "plugin stop gpu", Lines: []string{"example.com/gpu plugin exited"}, Counts: map[string][2]int64{gpu: {2, 0}}},
		{Command: "pod admit p1 gpu=1", Lines: []string{"p1 waiting for its device plugin (deferred admission)"}, Counts: map[string][2]int64{gpu: {2, 0}}},
		{Command: "plugin start gpu", Lines: []string{"example.com/gpu registered with 2 devices", "p1 admitted after waiting for its device plugin"}, Counts: map[string][2]int64{gpu: {2, 2}}},
		{Command: "pod admit p2 gpu=3", Lines: []string{"p2 rejected: UnexpectedAdmissionError: requested number of devices unavailable"}, Counts: map[string][2]int64{gpu: {2, 2}}},
	}}
}

func render(t *testing.T, tl ...*Timeline) string {
	t.Helper()
	var b bytes.Buffer
	if err := RenderSVG(&b, tl...); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestSVGDotColours: the dot of a pod admitted after waiting is drawn in the admitted colour, not
// the waiting one; waiting and rejected pods keep their own colours.
func TestSVGDotColours(t *testing.T) {
	svg := render(t, waitStory())
	for line, colour := range map[string]string{
		"p1 admitted after waiting for its device plugin":       colourAdmitted,
		"p1 waiting for its device plugin (deferred admission)": colourWaiting,
		"p2 rejected: UnexpectedAdmissionError":                 colourRejected,
	} {
		re := regexp.MustCompile(`<circle [^>]*fill="([^"]+)"><title>` + regexp.QuoteMeta(line))
		m := re.FindStringSubmatch(svg)
		if m == nil {
			t.Errorf("no dot for %q", line)
			continue
		}
		if m[1] != colour {
			t.Errorf("dot for %q drawn in %s, want %s", line, m[1], colour)
		}
	}
}

// TestSVGCapacityVisible: the capacity line is drawn after (over) the allocatable line and dashed,
// so where both have the same value the blue line shows through the gaps of the grey one.
func TestSVGCapacityVisible(t *testing.T) {
	svg := render(t, waitStory())
	polylines := regexp.MustCompile(`<polyline [^>]*>`).FindAllString(svg, -1)
	if len(polylines) != 2 {
		t.Fatalf("want 2 polylines (capacity, allocatable), got %d", len(polylines))
	}
	if !strings.Contains(polylines[0], colourAllocatable) {
		t.Errorf("first polyline should be the allocatable one, drawn under the capacity: %s", polylines[0])
	}
	if !strings.Contains(polylines[1], colourCapacity) || !strings.Contains(polylines[1], "stroke-dasharray") {
		t.Errorf("capacity must be drawn last and dashed: %s", polylines[1])
	}
}

// TestSVGAxisLabelsAndLegend: the y axis carries its values (0..2 for two devices), every pod dot
// has its name written beside it, and a legend names every mark.
func TestSVGAxisLabelsAndLegend(t *testing.T) {
	svg := render(t, waitStory())
	ticks := regexp.MustCompile(`<text class="tick"[^>]*>(\d+)</text>`).FindAllStringSubmatch(svg, -1)
	var got []string
	for _, m := range ticks {
		got = append(got, m[1])
	}
	if strings.Join(got, " ") != "0 1 2" {
		t.Errorf("y-axis values %v, want 0 1 2", got)
	}
	labels := regexp.MustCompile(`<text class="pod"[^>]*>([^<]+)</text>`).FindAllStringSubmatch(svg, -1)
	var pods []string
	for _, m := range labels {
		pods = append(pods, m[1])
	}
	if strings.Join(pods, " ") != "p1 p1 p2" {
		t.Errorf("pod labels %v, want p1 (waiting), p1 (admitted), p2 (rejected)", pods)
	}
	i := strings.Index(svg, `<g id="legend">`)
	if i < 0 {
		t.Fatalf("no legend")
	}
	legend, _, _ := strings.Cut(svg[i:], "\n</g>\n")
	for _, name := range []string{"capacity", "allocatable", "admitted", "rejected", "waiting", "restart"} {
		if !strings.Contains(legend, ">"+name) {
			t.Errorf("legend lacks %q", name)
		}
	}
	if got := tickStep(8); got != 2 {
		t.Errorf("tickStep(8) = %d, want 2", got)
	}
	if got := tickStep(100); got != 50 {
		t.Errorf("tickStep(100) = %d, want 50", got)
	}
}

// TestSVGNoEmptyMargin: the picture ends just below the slanted command labels (no fixed empty
// band at the bottom) and is wide enough for the last label.
func TestSVGNoEmptyMargin(t *testing.T) {
	svg := render(t, waitStory(), waitStory())
	head := regexp.MustCompile(`<svg [^>]*width="(\d+)" height="(\d+)"`).FindStringSubmatch(svg)
	if head == nil {
		t.Fatal("no svg size")
	}
	width, _ := strconv.Atoi(head[1])
	height, _ := strconv.Atoi(head[2])
	labels := regexp.MustCompile(`<text [^>]*x="(\d+)" y="(\d+)" transform="rotate\(45[^>]*>([^<]+)</text>`).FindAllStringSubmatch(svg, -1)
	if len(labels) != len(waitStory().Steps) {
		t.Fatalf("%d command labels, want %d", len(labels), len(waitStory().Steps))
	}
	bottom, right := 0, 0
	for _, m := range labels {
		x, _ := strconv.Atoi(m[1])
		y, _ := strconv.Atoi(m[2])
		// Generous bound of a slanted label's reach: 6.5 px per character times sin 45°.
		reach := int(float64(len(m[3])) * 6.5 * 0.71)
		bottom = max(bottom, y+reach)
		right = max(right, x+reach)
	}
	if height > bottom+30 {
		t.Errorf("height %d leaves %d px below the lowest label's reach (%d); want at most 30", height, height-bottom, bottom)
	}
	if width+10 < right {
		t.Errorf("width %d cuts the last label, which reaches %d", width, right)
	}
}

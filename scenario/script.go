package scenario

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/kdm-project/kdm/devicemanager"
)

// Directive is one command of a script.
type Directive struct {
	Cmd  string
	Args []string
	Line int
}

// Timeline is a script's run under one policy.
type Timeline struct {
	Policy string
	Script string
	Steps  []Step
}

// ParseFile reads a script in the datadriven format: a command line, "----", the expected
// output up to a blank line. Lines starting with # are comments. Only the commands are kept.
func ParseFile(path string) ([]Directive, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []Directive
	sc := bufio.NewScanner(f)
	n, inOutput := 0, false
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		switch {
		case inOutput:
			if line == "" {
				inOutput = false
			}
		case line == "" || strings.HasPrefix(line, "#"):
		case line == "----":
			inOutput = true
		default:
			fields := strings.Fields(line)
			out = append(out, Directive{Cmd: fields[0], Args: fields[1:], Line: n})
		}
	}
	return out, sc.Err()
}

// RunFile runs a script under one policy and returns its timeline. A command that fails, or
// breaks the one-holder-per-device invariant, ends the run with an error naming its line.
func RunFile(path, policy string) (*Timeline, error) {
	dirs, err := ParseFile(path)
	if err != nil {
		return nil, err
	}
	r, err := New(Config{Policy: policy, ScriptDir: filepath.Dir(path)})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	tl := &Timeline{Policy: policy, Script: path}
	for _, d := range dirs {
		st, err := r.Do(d.Cmd, d.Args)
		tl.Steps = append(tl.Steps, st)
		if err != nil {
			return tl, fmt.Errorf("%s:%d: %s: %w", path, d.Line, st.Command, err)
		}
	}
	return tl, nil
}

// FormatTimeline prints a timeline, one command and its consequences per block.
func FormatTimeline(tl *Timeline) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s under --policy %s\n\n", filepath.Base(tl.Script), tl.Policy)
	for _, st := range tl.Steps {
		fmt.Fprintf(&b, "[t=%v] $ %s\n", st.At, st.Command)
		for _, l := range st.Lines {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	return b.String()
}

// DefaultWidth is the width, in characters, FormatCompare fills when given none.
const DefaultWidth = 120

// Policies returns the policies the scenario runner compares, one column of `kdm scenario
// --compare` and one prefix of a recorded outcome each: every policy of
// devicemanager.PolicyNames, each supported kubelet oldest first, then kdm. A new kubelet
// minor there is a new column here.
func Policies() []string { return devicemanager.PolicyNames() }

// RunFiles runs a script under each policy in turn and returns the timelines in the same
// order, one per policy even when some fail. A policy whose run fails keeps the steps it made,
// the failing one ending with a line that says why, and a step per command it did not run;
// the error then names every policy that failed, with RunFile's error.
func RunFiles(path string, policies []string) ([]*Timeline, error) {
	out := make([]*Timeline, 0, len(policies))
	var errs []error
	for _, p := range policies {
		tl, err := RunFile(path, p)
		if err == nil {
			out = append(out, tl)
			continue
		}
		errs = append(errs, fmt.Errorf("policy %s failed: %w", p, err))
		if tl == nil {
			tl = &Timeline{Policy: p, Script: path}
		}
		if n := len(tl.Steps); n > 0 {
			tl.Steps[n-1].Lines = append(tl.Steps[n-1].Lines, "FAILED under "+p+": "+err.Error())
		}
		if dirs, perr := ParseFile(path); perr == nil {
			for _, d := range dirs[min(len(tl.Steps), len(dirs)):] {
				tl.Steps = append(tl.Steps, Step{Command: strings.TrimSpace(d.Cmd + " " + strings.Join(d.Args, " ")),
					Lines: []string{"(not run under " + p + ": it failed above)"}})
			}
		}
		out = append(out, tl)
	}
	return out, errors.Join(errs...)
}

// FormatCompare prints timelines of the same script side by side, command by command, within
// width characters (DefaultWidth if width is not positive). The lines every timeline shares
// at the start and at the end of a command's outcome are printed once, across the page; the
// lines in between, where the policies differ, are printed in one column per timeline under
// the policies' names. Long lines wrap at spaces, never cut, so a rejection keeps its reason.
func FormatCompare(width int, timelines ...*Timeline) string {
	if width <= 0 {
		width = DefaultWidth
	}
	var out strings.Builder
	if len(timelines) == 0 {
		return ""
	}
	names := make([]string, len(timelines))
	steps := 0
	for i, tl := range timelines {
		names[i] = tl.Policy
		steps = max(steps, len(tl.Steps))
	}
	fmt.Fprintf(&out, "%s under %s\n", filepath.Base(timelines[0].Script), joinNames(names))
	const indent = "    "
	sep := " | "
	colW := max((width-len(indent)-len(sep)*(len(timelines)-1))/len(timelines), 12)
	for i := 0; i < steps; i++ {
		cmd := ""
		lines := make([][]string, len(timelines))
		for j, tl := range timelines {
			if i < len(tl.Steps) {
				cmd, lines[j] = tl.Steps[i].Command, tl.Steps[i].Lines
			}
		}
		fmt.Fprintf(&out, "\n$ %s\n", cmd)
		head, mid, tail := splitShared(lines)
		shared := func(ls []string) {
			for _, l := range ls {
				for _, w := range wrapText(l, width-len(indent)) {
					fmt.Fprintf(&out, "%s%s\n", indent, strings.TrimRight(w, " "))
				}
			}
		}
		shared(head)
		if mid != nil {
			writeColumns(&out, indent, sep, colW, names, mid)
		}
		shared(tail)
	}
	return out.String()
}

// joinNames lists names as prose: "a", "a and b", "a, b and c".
func joinNames(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// splitShared splits each policy's lines of one command into the lines all of them share at
// the start (head) and at the end (tail), and what is left of each (mid). mid is nil when
// every policy printed the same lines.
func splitShared(lines [][]string) (head []string, mid [][]string, tail []string) {
	same := func(at func(ls []string) (string, bool)) (string, bool) {
		first, ok := at(lines[0])
		if !ok {
			return "", false
		}
		for _, ls := range lines[1:] {
			if l, ok := at(ls); !ok || l != first {
				return "", false
			}
		}
		return first, true
	}
	h := 0
	for {
		l, ok := same(func(ls []string) (string, bool) {
			if h < len(ls) {
				return ls[h], true
			}
			return "", false
		})
		if !ok {
			break
		}
		head = append(head, l)
		h++
	}
	shortest := len(lines[0])
	for _, ls := range lines {
		shortest = min(shortest, len(ls))
	}
	t := 0
	for t < shortest-h {
		l, ok := same(func(ls []string) (string, bool) { return ls[len(ls)-1-t], true })
		if !ok {
			break
		}
		tail = append([]string{l}, tail...)
		t++
	}
	differ := false
	for _, ls := range lines {
		rest := ls[h : len(ls)-t]
		mid = append(mid, rest)
		differ = differ || len(rest) > 0
	}
	if !differ {
		mid = nil
	}
	return head, mid, tail
}

// writeColumns prints one column per policy, headed by its name: row k holds each policy's
// k-th line, wrapped within the column, and an empty cell where a policy printed fewer lines.
func writeColumns(out *strings.Builder, indent, sep string, colW int, names []string, cols [][]string) {
	row := func(cells [][]string) {
		height := 0
		for _, c := range cells {
			height = max(height, len(c))
		}
		for k := 0; k < height; k++ {
			var b strings.Builder
			for j, c := range cells {
				cell := ""
				if k < len(c) {
					cell = c[k]
				}
				if j > 0 {
					b.WriteString(sep)
				}
				if j < len(cells)-1 {
					fmt.Fprintf(&b, "%-*s", colW, cell)
				} else {
					b.WriteString(cell)
				}
			}
			fmt.Fprintf(out, "%s%s\n", indent, strings.TrimRight(b.String(), " "))
		}
	}
	header := make([][]string, len(names))
	rule := make([][]string, len(names))
	for j, n := range names {
		header[j] = []string{n}
		rule[j] = []string{strings.Repeat("-", min(len(n), colW))}
	}
	row(header)
	row(rule)
	rows := 0
	for _, c := range cols {
		rows = max(rows, len(c))
	}
	for k := 0; k < rows; k++ {
		cells := make([][]string, len(cols))
		for j, c := range cols {
			if k < len(c) {
				cells[j] = wrapText(c[k], colW)
			}
		}
		row(cells)
	}
}

// wrapText breaks s at spaces into lines of at most width characters (runes), the lines after
// the first indented by two spaces; a word longer than a line is split. Nothing is dropped.
func wrapText(s string, width int) []string {
	width = max(width, 8)
	var out []string
	line, prefix := "", ""
	for _, word := range strings.Fields(s) {
		for {
			candidate := word
			if line != "" {
				candidate = line + " " + word
			}
			if utf8.RuneCountInString(prefix+candidate) <= width {
				line = candidate
				break
			}
			if line != "" {
				out = append(out, prefix+line)
				line, prefix = "", "  "
				continue
			}
			// A word longer than a whole line: split it.
			r := []rune(word)
			n := width - len(prefix)
			out = append(out, prefix+string(r[:n]))
			word, prefix = string(r[n:]), "  "
		}
	}
	if line != "" || len(out) == 0 {
		out = append(out, prefix+line)
	}
	return out
}

// combined renders one command's outcome under every policy for the datadriven files:
// identical outcomes once; otherwise each distinct outcome once, in the order of the first
// policy that has it, each line prefixed with the label of the policies that share it
// (groupLabel), so that a kubelet minor that behaves like its neighbours adds no lines.
func combined(policies []string, steps []Step) string {
	same := true
	for _, st := range steps[1:] {
		same = same && slices.Equal(st.Lines, steps[0].Lines)
	}
	if same {
		return strings.Join(steps[0].Lines, "\n")
	}
	var groups [][]int // indexes of policies with equal lines, by first member
	for i, st := range steps {
		found := false
		for g, members := range groups {
			if slices.Equal(steps[members[0]].Lines, st.Lines) {
				groups[g] = append(members, i)
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, []int{i})
		}
	}
	labels := make([]string, len(groups))
	w := 0
	for g, members := range groups {
		names := make([]string, len(members))
		for j, i := range members {
			names[j] = policies[i]
		}
		labels[g] = groupLabel(policies, names) + ":"
		w = max(w, len(labels[g]))
	}
	var out []string
	for g, members := range groups {
		for _, l := range steps[members[0]].Lines {
			out = append(out, fmt.Sprintf("%-*s %s", w, labels[g], l))
		}
	}
	return strings.Join(out, "\n")
}

// groupLabel names the policies members (a subset of policies, in its order) that share an
// outcome. Kubelet minors that form a run of consecutive rows are named by the run, so that
// adding a minor that behaves like its neighbour leaves the label as it was: every kubelet is
// "kubelets", a run from the oldest (one minor or more) "kubelet <=1.N", one to the newest
// "kubelet >=1.N", one in between "kubelet 1.N..1.M", one minor in between its own name.
// Other policies follow by name.
func groupLabel(policies, members []string) string {
	var kubelets []string
	for _, p := range policies {
		if strings.HasPrefix(p, devicemanager.KubeletAlias+"-") {
			kubelets = append(kubelets, p)
		}
	}
	var runIdx []int
	var others []string
	for _, m := range members {
		if i := slices.Index(kubelets, m); i >= 0 {
			runIdx = append(runIdx, i)
		} else {
			others = append(others, m)
		}
	}
	var parts []string
	minor := func(i int) string { return strings.TrimPrefix(kubelets[i], devicemanager.KubeletAlias+"-") }
	consecutive := len(runIdx) > 0 && runIdx[len(runIdx)-1]-runIdx[0] == len(runIdx)-1
	switch {
	case len(runIdx) == 0:
	case !consecutive:
		for _, i := range runIdx {
			parts = append(parts, kubelets[i])
		}
	case len(runIdx) == len(kubelets) && len(kubelets) > 1:
		parts = append(parts, devicemanager.KubeletAlias+"s")
	case runIdx[0] == 0:
		parts = append(parts, devicemanager.KubeletAlias+" <="+minor(runIdx[len(runIdx)-1]))
	case runIdx[len(runIdx)-1] == len(kubelets)-1:
		parts = append(parts, devicemanager.KubeletAlias+" >="+minor(runIdx[0]))
	case len(runIdx) == 1:
		parts = append(parts, kubelets[runIdx[0]])
	default:
		parts = append(parts, devicemanager.KubeletAlias+" "+minor(runIdx[0])+".."+minor(runIdx[len(runIdx)-1]))
	}
	return strings.Join(append(parts, others...), ", ")
}

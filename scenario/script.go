package scenario

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
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

// FormatCompare prints two timelines of the same script side by side, command by command.
func FormatCompare(a, b *Timeline) string {
	var out strings.Builder
	fmt.Fprintf(&out, "%s: --policy %s (left) and --policy %s (right)\n\n", filepath.Base(a.Script), a.Policy, b.Policy)
	tw := tabwriter.NewWriter(&out, 0, 4, 3, ' ', 0)
	for i := 0; i < max(len(a.Steps), len(b.Steps)); i++ {
		var la, lb []string
		cmd := ""
		if i < len(a.Steps) {
			la, cmd = a.Steps[i].Lines, a.Steps[i].Command
		}
		if i < len(b.Steps) {
			lb, cmd = b.Steps[i].Lines, b.Steps[i].Command
		}
		fmt.Fprintf(tw, "$ %s\t\n", cmd)
		for j := 0; j < max(len(la), len(lb)); j++ {
			left, right := "", ""
			if j < len(la) {
				left = la[j]
			}
			if j < len(lb) {
				right = lb[j]
			}
			marker := " "
			if left != right {
				marker = "|"
			}
			fmt.Fprintf(tw, "    %s\t%s %s\n", wrap(left), marker, right)
		}
	}
	_ = tw.Flush()
	return out.String()
}

func wrap(s string) string {
	if len(s) > 90 {
		return s[:89] + "…"
	}
	return s
}

// combined renders one command's outcome under both policies for the datadriven files:
// identical outcomes once, different ones per policy.
func combined(a, b Step) string {
	if strings.Join(a.Lines, "\n") == strings.Join(b.Lines, "\n") {
		return strings.Join(a.Lines, "\n")
	}
	var out []string
	for _, l := range a.Lines {
		out = append(out, "kubelet-1.36: "+l)
	}
	for _, l := range b.Lines {
		out = append(out, "kdm:          "+l)
	}
	return strings.Join(out, "\n")
}

var _ io.Writer = (*strings.Builder)(nil)

package conformance

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Status is a check's verdict.
type Status string

// The verdicts, from best to worst. SKIP is a check that did not apply (an optional check not
// configured, or one whose precondition failed in an earlier check). ERROR is a check whose
// verdict the suite could not reach because a step of its own failed (a health trigger
// command killed, the manager probe not starting); its evidence names the step. It says
// nothing about the plugin.
const (
	Pass  Status = "PASS"
	Warn  Status = "WARN"
	Fail  Status = "FAIL"
	Skip  Status = "SKIP"
	Error Status = "ERROR"
)

// SchemaVersion is the version of the JSON report layout (see docs/conformance.md).
const SchemaVersion = 1

// Result is the outcome of one check.
type Result struct {
	// ID is the check's number, 1 to 10, as listed in docs/conformance.md.
	ID int `json:"id"`
	// Name is the check's short stable name, e.g. "manager-restart".
	Name string `json:"name"`
	// Title says what the check verifies.
	Title string `json:"title"`
	// Kubelet is the kubelet behaviour the check relies on.
	Kubelet string `json:"kubelet"`
	Status  Status `json:"status"`
	// Evidence are the observations behind the verdict, most important first.
	Evidence []string `json:"evidence"`
	// Duration is how long the check ran.
	Duration time.Duration `json:"-"`
}

// Report is the outcome of a conformance run.
type Report struct {
	// Command is the plugin command as run (the directory flag appended).
	Command []string `json:"command"`
	// Dir is the device-plugin directory the plugin was given.
	Dir string `json:"dir"`
	// ResourceName is the resource of the plugin's first registration ("" if none).
	ResourceName string `json:"resourceName"`
	// Resources are every resource the plugin registered at start, in the order of their
	// first Register call; each is checked apart. Empty (not null) if none.
	Resources []string  `json:"resources"`
	Started   time.Time `json:"started"`
	// Duration is how long the whole run took.
	Duration time.Duration `json:"-"`
	Checks   []Result      `json:"checks"`
}

// Failed reports whether any check failed.
func (r *Report) Failed() bool {
	for _, c := range r.Checks {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Errored reports whether any check ended in ERROR.
func (r *Report) Errored() bool {
	for _, c := range r.Checks {
		if c.Status == Error {
			return true
		}
	}
	return false
}

// ExitCode is the exit status of `kdm conformance` for the report: 1 when a check failed
// (whatever else), 3 when none failed but one ended in ERROR, else 0.
func (r *Report) ExitCode() int {
	switch {
	case r.Failed():
		return 1
	case r.Errored():
		return 3
	}
	return 0
}

// Counts returns how many checks ended with each status.
func (r *Report) Counts() map[Status]int {
	n := map[Status]int{Pass: 0, Warn: 0, Fail: 0, Skip: 0, Error: 0}
	for _, c := range r.Checks {
		n[c.Status]++
	}
	return n
}

// Check returns the result of the named check, or false.
func (r *Report) Check(name string) (Result, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Result{}, false
}

// WriteTable writes the human-readable report: one row per check with its status, time and
// first line of evidence, further evidence indented below and, under a WARN or FAIL, the
// kubelet behaviour the verdict rests on ("kubelet: ..."), then a summary line.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "#\tCHECK\tSTATUS\tTIME\tEVIDENCE\n")
	for _, c := range r.Checks {
		first := ""
		if len(c.Evidence) > 0 {
			first = c.Evidence[0]
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", c.ID, c.Name, c.Status, fmtDuration(c.Duration), first)
		for _, e := range c.Evidence[min(1, len(c.Evidence)):] {
			fmt.Fprintf(tw, "\t\t\t\t  %s\n", e)
		}
		if (c.Status == Warn || c.Status == Fail) && c.Kubelet != "" {
			fmt.Fprintf(tw, "\t\t\t\t  kubelet: %s\n", c.Kubelet)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	n := r.Counts()
	res := fmt.Sprintf("resource %q", r.ResourceName)
	if len(r.Resources) > 1 {
		res = "resources " + quoteList(r.Resources)
	}
	errs := ""
	if n[Error] > 0 {
		errs = fmt.Sprintf(", %d errors (the suite's own step failed)", n[Error])
	}
	_, err := fmt.Fprintf(w, "\n%d passed, %d warnings, %d failed, %d skipped%s in %s (%s, directory %s)\n",
		n[Pass], n[Warn], n[Fail], n[Skip], errs, fmtDuration(r.Duration), res, r.Dir)
	return err
}

func fmtDuration(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}

type jsonResult struct {
	Result
	DurationSeconds float64 `json:"durationSeconds"`
}

type jsonReport struct {
	SchemaVersion int `json:"schemaVersion"`
	*Report
	DurationSeconds float64        `json:"durationSeconds"`
	Summary         map[Status]int `json:"summary"`
	Passed          bool           `json:"passed"`
	Checks          []jsonResult   `json:"checks"`
}

// WriteJSON writes the report as one indented JSON document; docs/conformance.md describes it.
func (r *Report) WriteJSON(w io.Writer) error {
	out := jsonReport{SchemaVersion: SchemaVersion, Report: r, DurationSeconds: round3(r.Duration),
		Summary: r.Counts(), Passed: r.ExitCode() == 0}
	if r.Resources == nil {
		rc := *r
		rc.Resources = []string{}
		out.Report = &rc
	}
	for _, c := range r.Checks {
		if c.Evidence == nil {
			c.Evidence = []string{}
		}
		out.Checks = append(out.Checks, jsonResult{Result: c, DurationSeconds: round3(c.Duration)})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func round3(d time.Duration) float64 {
	return float64(d.Milliseconds()) / 1000
}

type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Error     *junitMessage `xml:"error,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the report as JUnit XML: one testsuite "kdm conformance", one testcase per
// check. FAIL is a failure, ERROR an error, SKIP is skipped, and a WARN passes with its evidence, prefixed
// "WARN:", in system-out so that CI shows it without failing the build.
func (r *Report) WriteJUnit(w io.Writer) error {
	n := r.Counts()
	suite := junitSuite{Name: "kdm conformance", Tests: len(r.Checks), Failures: n[Fail], Errors: n[Error], Skipped: n[Skip],
		Time: fmt.Sprintf("%.3f", r.Duration.Seconds())}
	for _, c := range r.Checks {
		tc := junitCase{Name: fmt.Sprintf("%02d %s", c.ID, c.Name), ClassName: "kdm.conformance",
			Time: fmt.Sprintf("%.3f", c.Duration.Seconds())}
		text := strings.Join(c.Evidence, "\n")
		msg := ""
		if len(c.Evidence) > 0 {
			msg = c.Evidence[0]
		}
		switch c.Status {
		case Fail:
			tc.Failure = &junitMessage{Message: msg, Text: text}
		case Error:
			tc.Error = &junitMessage{Message: msg, Text: text}
		case Skip:
			tc.Skipped = &junitMessage{Message: msg}
		case Warn:
			tc.SystemOut = "WARN: " + text
		default:
			tc.SystemOut = text
		}
		suite.Cases = append(suite.Cases, tc)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSuite{suite}}); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

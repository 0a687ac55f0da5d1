package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdm-project/kdm/internal/testbin"
)

// binDir holds kdm, kdm-nvml-plugin and faultplugin, built once by TestMain.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := testbin.Build("kdm-conformance-bin", map[string]string{
		"kdm":             "../cmd/kdm",
		"kdm-nvml-plugin": "../cmd/kdm-nvml-plugin",
		"faultplugin":     "./testdata/faultplugin",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	binDir = dir
	return m.Run()
}

// jsonReport is the documented --json layout (docs/conformance.md), decoded strictly enough
// that a renamed field fails the test.
type jsonReport struct {
	SchemaVersion   int            `json:"schemaVersion"`
	Command         []string       `json:"command"`
	Dir             string         `json:"dir"`
	ResourceName    string         `json:"resourceName"`
	Started         time.Time      `json:"started"`
	DurationSeconds float64        `json:"durationSeconds"`
	Summary         map[string]int `json:"summary"`
	Passed          bool           `json:"passed"`
	Checks          []struct {
		ID              int      `json:"id"`
		Name            string   `json:"name"`
		Title           string   `json:"title"`
		Kubelet         string   `json:"kubelet"`
		Status          string   `json:"status"`
		Evidence        []string `json:"evidence"`
		DurationSeconds float64  `json:"durationSeconds"`
	} `json:"checks"`
}

func (r jsonReport) status(name string) string {
	for _, c := range r.Checks {
		if c.Name == name {
			return c.Status
		}
	}
	return "(missing)"
}

func (r jsonReport) evidence(name string) string {
	for _, c := range r.Checks {
		if c.Name == name {
			return strings.Join(c.Evidence, " | ")
		}
	}
	return ""
}

// conformance runs `kdm conformance --json` with the short test windows, extra flags, and
// the plugin command; it returns the decoded report and the exit code.
func conformance(t *testing.T, flags []string, plugin ...string) (jsonReport, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"conformance", "--json", "--cpu-window", "2s", "--stream-close-window", "1s"}, flags...)
	args = append(append(args, "--"), plugin...)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "kdm"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("kdm conformance: %v\nstderr:\n%s", err, stderr.String())
	}
	var rep jsonReport
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("decoding the --json report (exit %d): %v\nstderr:\n%s", code, err, stderr.String())
	}
	if rep.SchemaVersion != 1 || len(rep.Checks) != 10 {
		t.Fatalf("report: schemaVersion %d, %d checks; want 1 and 10", rep.SchemaVersion, len(rep.Checks))
	}
	for i, c := range rep.Checks {
		if c.ID != i+1 || c.Name == "" || c.Title == "" || c.Kubelet == "" || len(c.Evidence) == 0 {
			t.Errorf("check %d is incomplete: %+v", i+1, c)
		}
	}
	return rep, code
}

// TestReferencePluginPasses runs the suite against the reference GPU plugin on mock GPUs, with
// the health check driven through its health control directory: every check passes, the
// exit code is 0, and the JUnit report has ten passing test cases.
func TestReferencePluginPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole conformance suite against real plugins; run by make test")
	}
	t.Parallel()
	health := t.TempDir()
	junit := filepath.Join(t.TempDir(), "junit.xml")
	rep, code := conformance(t, []string{"--dir-flag", "device-plugin-dir", "--junit", junit,
		"--health-trigger", "echo Unhealthy > " + health + "/$KDM_CONFORMANCE_DEVICE",
		"--health-restore", "echo Healthy > " + health + "/$KDM_CONFORMANCE_DEVICE"},
		filepath.Join(binDir, "kdm-nvml-plugin"), "--mock", "dgxa100", "--health-control-dir", health)
	for _, c := range rep.Checks {
		if c.Status != "PASS" {
			t.Errorf("check %d %s: %s: %v", c.ID, c.Name, c.Status, c.Evidence)
		}
	}
	if code != 0 || !rep.Passed || rep.Summary["PASS"] != 10 || rep.ResourceName != "nvidia.com/gpu" {
		t.Errorf("exit %d, passed %t, summary %v, resource %q; want 0, true, 10 PASS, nvidia.com/gpu",
			code, rep.Passed, rep.Summary, rep.ResourceName)
	}
	if last := rep.Command[len(rep.Command)-1]; last != "--device-plugin-dir="+rep.Dir {
		t.Errorf("plugin command ends with %q; want the directory flag", last)
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var suites struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Cases    []struct {
				Name    string    `xml:"name,attr"`
				Failure *struct{} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &suites); err != nil {
		t.Fatalf("JUnit report: %v\n%s", err, b)
	}
	if len(suites.Suites) != 1 || suites.Suites[0].Tests != 10 || suites.Suites[0].Failures != 0 ||
		suites.Suites[0].Cases[0].Name != "01 registration" {
		t.Errorf("JUnit report does not list 10 passing checks:\n%s", b)
	}
}

// TestFaultsDetected runs the suite against SDK-built plugins that each reproduce one fault
// seen in real plugins and expects the matching verdicts (and exit 1 exactly when one is
// FAIL). The well-behaved profile guards against false alarms.
func TestFaultsDetected(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole conformance suite against real plugins; run by make test")
	}
	fixed := t.TempDir()
	cases := []struct {
		fault string
		want  map[string]string
	}{
		{"none", map[string]string{"registration": "PASS", "list-and-watch": "PASS", "allocate": "PASS",
			"manager-restart": "PASS", "manager-absent-at-start": "PASS", "stream-close": "PASS",
			"duplicate-registration": "PASS", "idle-cpu": "PASS", "sigterm": "PASS", "health": "SKIP"}},
		// Never re-registers after a manager restart, then spins a CPU.
		{"no-reregister", map[string]string{"registration": "PASS", "manager-restart": "FAIL", "idle-cpu": "FAIL"}},
		// Re-registers, but its watcher spins afterwards.
		{"spin", map[string]string{"manager-restart": "PASS", "idle-cpu": "FAIL"}},
		// Exits when it starts before the manager: only a restart loop saves it.
		{"exit-if-no-manager", map[string]string{"registration": "PASS", "manager-absent-at-start": "WARN"}},
		// Exits whenever its ListAndWatch stream is closed.
		{"exit-on-stream-close", map[string]string{"registration": "PASS", "stream-close": "FAIL"}},
		// Places its socket in a fixed other directory.
		{"fixed-dir", map[string]string{"registration": "FAIL"}},
		// Two Register calls milliseconds apart.
		{"double-register", map[string]string{"registration": "PASS", "duplicate-registration": "WARN"}},
		// PreStartRequired only in GetDevicePluginOptions.
		{"prestart-mismatch", map[string]string{"registration": "WARN", "allocate": "PASS", "manager-restart": "PASS"}},
	}
	for _, tc := range cases {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			rep, code := conformance(t, []string{"--dir-flag", "device-plugin-dir"},
				filepath.Join(binDir, "faultplugin"), "--fault", tc.fault, "--fixed-dir", fixed)
			for name, want := range tc.want {
				if got := rep.status(name); got != want {
					t.Errorf("%s: %s, want %s; evidence: %s", name, got, want, rep.evidence(name))
				}
			}
			wantCode := 0
			if rep.Summary["FAIL"] > 0 {
				wantCode = 1
			}
			if code != wantCode || rep.Passed != (wantCode == 0) {
				t.Errorf("exit %d, passed %t with summary %v; want exit %d", code, rep.Passed, rep.Summary, wantCode)
			}
		})
	}
}

// TestIsolate checks --isolate: as root, a plugin that knows only the kubelet's default
// directory passes inside the private mount namespace, and the host's directory is left as
// it was; otherwise the command refuses with exit 2 and says why.
func TestIsolate(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		out, err := exec.Command(filepath.Join(binDir, "kdm"), "conformance", "--isolate", "--",
			filepath.Join(binDir, "kdm-nvml-plugin"), "--mock", "dgxa100").CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--isolate needs root") {
			t.Fatalf("non-root --isolate: %v, output %q; want exit 2 saying it needs root", err, out)
		}
		return
	}
	if testing.Short() {
		t.Skip("runs the whole conformance suite against real plugins; run by make test")
	}
	hostDir := "/var/lib/kubelet/device-plugins"
	before, _ := os.ReadDir(hostDir)
	rep, code := conformance(t, []string{"--isolate"}, filepath.Join(binDir, "kdm-nvml-plugin"), "--mock", "dgxa100")
	if code != 0 || rep.Dir != hostDir || rep.status("manager-restart") != "PASS" {
		t.Errorf("--isolate: exit %d, dir %q, manager-restart %s; want 0, %s, PASS (summary %v)",
			code, rep.Dir, rep.status("manager-restart"), hostDir, rep.Summary)
	}
	after, _ := os.ReadDir(hostDir)
	if len(before) != len(after) {
		t.Errorf("the host's %s changed: %d entries before, %d after", hostDir, len(before), len(after))
	}
}

// TestUsageErrors: no plugin command, or a malformed --dir-flag, is exit 2 with a message.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"conformance"}, {"conformance", "--dir-flag", "--x", "--", "true"}} {
		out, err := exec.Command(filepath.Join(binDir, "kdm"), args...).CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || len(out) == 0 {
			t.Errorf("kdm %v: %v, output %q; want exit 2 with a message", args, err, out)
		}
	}
}

package conformance

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestWriteTableGolden pins the table layout (issue 33): evidence below its row and, under a
// WARN or FAIL only, the kubelet behaviour the check cites; the summary names every resource
// of a plugin that serves several.
func TestWriteTableGolden(t *testing.T) {
	checks := Checks()
	byName := map[string]*Result{}
	for i := range checks {
		checks[i].Status, checks[i].Evidence, checks[i].Duration = Pass, []string{"fine"}, 100*time.Millisecond
		byName[checks[i].Name] = &checks[i]
	}
	*byName["manager-restart"] = withVerdict(*byName["manager-restart"], Fail,
		"example.com/fault: device IDs changed: missing [dev-0], new []", "example.com/null: same 2 device IDs")
	*byName["duplicate-registration"] = withVerdict(*byName["duplicate-registration"], Warn,
		`Register #2 for "example.com/fault" came 0.50s after #1 while the first connection was still streaming`)
	*byName["health"] = withVerdict(*byName["health"], Skip, "not configured (--health-trigger, --health-restore)")
	rep := &Report{Command: []string{"plugin"}, Dir: "/tmp/kdmc-1", ResourceName: "example.com/fault",
		Resources: []string{"example.com/fault", "example.com/null"}, Duration: 12 * time.Second, Checks: checks}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "table.golden")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("table differs from %s (go test -run TestWriteTableGolden -update rewrites it):\n%s", golden, b.String())
	}
	for _, c := range checks {
		shown := strings.Contains(b.String(), "kubelet: "+c.Kubelet)
		if want := c.Status == Warn || c.Status == Fail; shown != want {
			t.Errorf("check %d %s (%s): kubelet behaviour shown %t, want %t", c.ID, c.Name, c.Status, shown, want)
		}
	}
}

func withVerdict(r Result, st Status, ev ...string) Result {
	r.Status, r.Evidence = st, ev
	return r
}

// TestAnswerCounts (issue 33): Allocate evidence counts annotations, so an answer that holds
// only annotations (NVIDIA's CDI annotation mode) is not read as empty.
func TestAnswerCounts(t *testing.T) {
	for _, tc := range []struct {
		c    *pluginapi.ContainerAllocateResponse
		want string
	}{
		{&pluginapi.ContainerAllocateResponse{Annotations: map[string]string{"cdi.k8s.io/nvidia-device-plugin_uuid": "nvidia.com/gpu=GPU-0"}},
			"0 envs, 0 mounts, 0 device nodes, 0 CDI devices, 1 annotation"},
		{&pluginapi.ContainerAllocateResponse{Envs: map[string]string{"A": "1", "B": "2"},
			Devices: []*pluginapi.DeviceSpec{{HostPath: "/dev/x", ContainerPath: "/dev/x", Permissions: "rw"}}},
			"2 envs, 0 mounts, 1 device node, 0 CDI devices, 0 annotations"},
	} {
		if got := answerCounts(tc.c); got != tc.want {
			t.Errorf("answerCounts = %q, want %q", got, tc.want)
		}
	}
}

// TestStderrLines: a death's evidence starts at the last Go panic in the plugin's stderr when
// there is one, else shows its last lines.
func TestStderrLines(t *testing.T) {
	var b tailBuffer
	if got := b.lines(3); len(got) != 0 {
		t.Errorf("empty tail: %q", got)
	}
	_, _ = b.Write([]byte("starting\npanic: old\n\nregistered\npanic: send on closed channel\n\ngoroutine 7 [running]:\nmain.scan()\n\t/src/main.go:12 +0x1d\nexit\n"))
	if got, want := strings.Join(b.lines(3), "|"), "panic: send on closed channel|goroutine 7 [running]:|main.scan()"; got != want {
		t.Errorf("lines(3) = %q, want %q", got, want)
	}
	var c tailBuffer
	_, _ = c.Write([]byte("a\nb\n\nc\nd\n"))
	if got, want := strings.Join(c.lines(2), "|"), "c|d"; got != want {
		t.Errorf("lines(2) = %q, want %q", got, want)
	}
	var big tailBuffer
	_, _ = big.Write(bytes.Repeat([]byte("x"), 2*tailBytes))
	_, _ = big.Write([]byte("\nlast\n"))
	if got := big.lines(1); len(got) != 1 || got[0] != "last" {
		t.Errorf("after a long write: %q", got)
	}
	if big.size > tailBytes {
		t.Errorf("tail holds %d bytes, want at most %d", big.size, tailBytes)
	}
}

// TestErrorVerdict (issue 44): a check the suite could not judge because its own step failed
// is ERROR: a JUnit <error>, its own summary count, and exit status 3 unless a check failed,
// which still makes it 1.
func TestErrorVerdict(t *testing.T) {
	checks := Checks()
	for i := range checks {
		checks[i].Status, checks[i].Evidence = Pass, []string{"fine"}
	}
	checks[9].Status, checks[9].Evidence = Error, []string{`suite step "health trigger" ("x") failed after 30.00s: signal: killed: `}
	rep := &Report{Command: []string{"plugin"}, Dir: "/tmp/kdmc-1", Checks: checks}
	if rep.ExitCode() != 3 || rep.Failed() || !rep.Errored() || rep.Counts()[Error] != 1 {
		t.Errorf("exit %d, failed %t, errored %t, counts %v; want 3, false, true, 1 ERROR", rep.ExitCode(), rep.Failed(), rep.Errored(), rep.Counts())
	}
	var j bytes.Buffer
	if err := rep.WriteJUnit(&j); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(j.String(), `errors="1"`) || !strings.Contains(j.String(), `<error message="suite step &#34;health trigger&#34;`) {
		t.Errorf("JUnit report lacks the error:\n%s", j.String())
	}
	var tb bytes.Buffer
	if err := rep.WriteTable(&tb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tb.String(), "1 errors (the suite's own step failed)") {
		t.Errorf("table summary does not count the error:\n%s", tb.String())
	}
	checks[3].Status = Fail
	if rep.ExitCode() != 1 {
		t.Errorf("with a FAIL and an ERROR: exit %d, want 1", rep.ExitCode())
	}
}

// TestStderrAttributedByTime (issue 44): every process of a plugin writes to one pipe; the
// lines of a process are those that arrived while it ran, so a death never shows the panic of
// the process before it.
func TestStderrAttributedByTime(t *testing.T) {
	var b tailBuffer
	_, _ = b.Write([]byte("panic: the first process's\ngoroutine 1 [running]:\n"))
	time.Sleep(5 * time.Millisecond)
	second := time.Now()
	_, _ = b.Write([]byte("Cannot register to kubelet service\n"))
	time.Sleep(5 * time.Millisecond)
	third := time.Now()
	_, _ = b.Write([]byte("panic: the third process's\n"))
	if got := strings.Join(b.between(second, third, 6), "|"); got != "Cannot register to kubelet service" {
		t.Errorf("the second process's lines: %q", got)
	}
	if got := strings.Join(b.between(third, time.Time{}, 6), "|"); got != "panic: the third process's" {
		t.Errorf("the third process's lines: %q", got)
	}
}

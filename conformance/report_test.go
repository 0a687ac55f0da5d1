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

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/deviceplugin/nvml"
)

// TestPluginRefusesLiveSocket (issue 30 item 7): a second kdm-nvml-plugin started for another
// resource on the socket path of a running one must exit with an error naming the path and
// leave the running plugin's socket alone: the running plugin keeps its GPUs and answers
// Allocate. A copy given its own --socket-name then runs beside it. Under both policies.
func TestPluginRefusesLiveSocket(t *testing.T) {
	const other = "example.com/gpu2"
	forEachPolicy(t, func(t *testing.T, n *node, policy string) {
		n.startWithGPUs(policy)
		sock := filepath.Join(n.pluginDir, nvml.DefaultSocketName)
		served, err := os.Lstat(sock)
		if err != nil {
			t.Fatalf("the running plugin's socket: %v", err)
		}

		second := n.start("kdm-nvml-plugin", "--mock", "dgxa100", "--device-plugin-dir", n.pluginDir,
			"--resource-name", other, "-v", "2")
		select {
		case <-second.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("a second plugin on the live socket %s is still running after 30s", sock)
		}
		if code := second.cmd.ProcessState.ExitCode(); code != 1 {
			t.Fatalf("second plugin exited with %d, want 1", code)
		}
		if logCount(t, second, "socket in use", sock) == 0 {
			t.Fatalf("second plugin's log does not say that %s is in use", sock)
		}
		if now, err := os.Lstat(sock); err != nil || !os.SameFile(served, now) {
			t.Fatalf("the running plugin's socket was removed or replaced (stat: %v)", err)
		}
		if got := n.admit("after-refusal", 2); len(got) != 2 {
			t.Fatalf("pod admitted with %v after the refused start, want 2 GPUs", got)
		}

		beside := n.start("kdm-nvml-plugin", "--mock", "dgxa100", "--device-plugin-dir", n.pluginDir,
			"--resource-name", other, "--socket-name", "gpu2.sock", "-v", "2")
		n.eventually("both resources served", func(st statusapi.NodeStatus) bool {
			return st.Allocatable[other] == 8 && gpus(8)(st)
		})
		if now, err := os.Lstat(sock); err != nil || !os.SameFile(served, now) {
			t.Fatalf("the first plugin's socket was removed or replaced by a copy with its own socket name (stat: %v)", err)
		}
		if got := n.admit("beside", 3); len(got) != 3 {
			t.Fatalf("pod admitted with %v beside the second copy, want 3 GPUs", got)
		}
		select {
		case <-beside.done:
			t.Fatalf("the copy with its own socket name exited: %s", readLog(t, beside))
		default:
		}
		if strings.Contains(readLog(t, beside), "in use") {
			t.Fatalf("the copy with its own socket name reported a socket in use")
		}
	})
}

// readLog returns a process's log so far.
func readLog(t *testing.T, p *process) string {
	t.Helper()
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

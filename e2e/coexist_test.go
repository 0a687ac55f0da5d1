package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecondDeviceManagerRefusesToStart: a kdm started on the directories of a running one
// exits 1 at once, naming the live kubelet.sock, and takes nothing away from the first: its
// plugin stays registered. Once the first is SIGKILLed, leaving its socket file behind, a new
// kdm starts, replaces the stale socket and gets the plugin back.
func TestSecondDeviceManagerRefusesToStart(t *testing.T) {
	n := newNode(t)
	first := n.startServing("the first kdm serves the plugin's GPUs")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "kdm"), "run", "--root-dir", n.rootDir,
		"--device-plugin-dir", n.pluginDir, "--healthz-bind-address", freeAddr(t)).CombinedOutput()
	sock := filepath.Join(n.pluginDir, "kubelet.sock")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "refusing to start") || !strings.Contains(string(out), sock) {
		t.Fatalf("second kdm: %v, output:\n%s\nwant exit status 1 naming %s", err, out, sock)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the first kdm's socket: %v", err)
	}
	n.eventually("the first kdm still serves the plugin's GPUs", gpus(8))

	first.kill()
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("SIGKILL should leave kubelet.sock behind: %v", err)
	}
	second := n.startKdm()
	n.eventually("a kdm started over the stale socket gets the plugin back", gpus(8))
	second.terminate(t)
}

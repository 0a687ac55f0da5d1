package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/checkpoint"
)

// TestLostCheckpoint: the checkpoint is emptied, corrupted or removed while pods run, and kdm
// restarts. The running pods keep exactly their GPUs (status, podresources and their result
// files, which still carry NVIDIA_VISIBLE_DEVICES), the next pod gets only free GPUs, a pod
// that does not fit is rejected, and the checkpoint is valid again.
func TestLostCheckpoint(t *testing.T) {
	innerLoopSkips(t, "restarts kdm once per way of losing the checkpoint")
	losses := []struct {
		name string
		lose func(path string) error
	}{
		{"emptied while kdm runs", func(p string) error { return os.WriteFile(p, nil, 0o600) }},
		{"corrupt", func(p string) error {
			return os.WriteFile(p, []byte(`{"Data":{"PodDeviceEntries":[{"PodUID":"x"`), 0o600)
		}},
		{"removed", os.Remove},
	}
	for _, policy := range policies {
		for _, loss := range losses {
			t.Run(policy+"/"+loss.name, func(t *testing.T) {
				n := newNode(t)
				kdm := n.startWithGPUs(policy)
				n.writePod("a", 3)
				n.writePod("b", 2)
				st := n.eventually("a and b admitted", func(st statusapi.NodeStatus) bool {
					return len(visible(pod(st, "a"))) == 3 && len(visible(pod(st, "b"))) == 2
				})
				held := map[string][]string{"a": sorted(visible(pod(st, "a"))), "b": sorted(visible(pod(st, "b")))}

				cp := filepath.Join(n.pluginDir, checkpoint.FileName)
				if err := loss.lose(cp); err != nil {
					t.Fatal(err)
				}
				kdm.kill()
				kdm = n.restartKeeping(policy, held, "c", 3)
				n.writePod("d", 1)
				st = n.eventually("d rejected", func(st statusapi.NodeStatus) bool {
					p := pod(st, "d")
					return p != nil && p.Phase == podresult.PhaseRejected
				})
				if msg := pod(st, "d").Message; !strings.Contains(msg, "Available: 0") {
					t.Fatalf("d rejected with %q, want the kubelet's Available: 0", msg)
				}
				n.expectHolding(held)
				n.expectCheckpointHolds(held)
				kdm.terminate(t)
			})
		}
	}
}

// TestUnreadableCheckpoint: a checkpoint kdm cannot read (owned by root, mode 000, kdm not
// root) is never replaced: kdm refuses to start with a message naming the file and the error,
// makes no quarantine copy, and once the file is readable again the pods keep their GPUs.
func TestUnreadableCheckpoint(t *testing.T) {
	for _, policy := range policies {
		t.Run(policy, func(t *testing.T) {
			n := newNode(t)
			kdm := n.startWithGPUs(policy)
			held := map[string][]string{"a": n.admit("a", 4)}
			kdm.kill()

			cp := filepath.Join(n.pluginDir, checkpoint.FileName)
			before, err := os.ReadFile(cp)
			if err != nil {
				t.Fatal(err)
			}
			out, code := n.runKdmUnprivileged(t, cp, "--policy", policy)
			if code == 0 {
				t.Fatalf("kdm started with an unreadable checkpoint; output:\n%s", out)
			}
			if !strings.Contains(out, "cannot read the device checkpoint "+cp) || !strings.Contains(out, "permission denied") {
				t.Fatalf("kdm's message does not name the file and the error:\n%s", out)
			}
			if err := os.Chmod(cp, 0o600); err != nil {
				t.Fatal(err)
			}
			after, err := os.ReadFile(cp)
			if err != nil || !bytes.Equal(before, after) {
				t.Fatalf("the unreadable checkpoint was changed (err %v)", err)
			}
			if m, _ := filepath.Glob(cp + ".corrupt-*"); len(m) != 0 {
				t.Fatalf("an unreadable (not corrupt) checkpoint was quarantined: %v", m)
			}

			kdm = n.restartKeeping(policy, held, "b", 4)
			kdm.terminate(t)
		})
	}
}

// runKdmUnprivileged runs `kdm run` on the node so that it cannot read the checkpoint: the file
// is made root's with mode 000, and kdm runs as nobody (when the test runs as root, after the
// node's directories are handed to nobody) or as the test's own non-root user. It returns the
// output and the exit code; kdm is killed if it has not exited within 20 s.
func (n *node) runKdmUnprivileged(t *testing.T, cp string, extra ...string) (string, int) {
	t.Helper()
	if err := os.Chmod(cp, 0); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, "kdm")
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		const nobody = 65534
		// nobody needs to reach the binary and own the node's directories; the checkpoint stays
		// root's.
		bin = filepath.Join(n.base, "kdm-unprivileged")
		raw, err := os.ReadFile(filepath.Join(binDir, "kdm"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, raw, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := filepath.Walk(n.base, func(p string, _ os.FileInfo, err error) error {
			if err != nil || p == cp {
				return err
			}
			return os.Lchown(p, nobody, nobody)
		}); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(n.base, 0o755); err != nil {
			t.Fatal(err)
		}
		cred = &syscall.Credential{Uid: nobody, Gid: nobody}
	}
	args := append([]string{"run", "--root-dir", n.rootDir, "--device-plugin-dir", n.pluginDir,
		"--pod-manifest-path", n.manifests, "--healthz-bind-address", n.healthAddr}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("kdm kept running with an unreadable checkpoint:\n%s", out.String())
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// expectHolding waits until each named pod is admitted holding exactly the given GPUs in
// /status, its result file and podresources.
func (n *node) expectHolding(want map[string][]string) {
	n.t.Helper()
	n.eventually("pods hold their GPUs", func(st statusapi.NodeStatus) bool {
		for name, ids := range want {
			p := pod(st, name)
			if p == nil || p.Phase != podresult.PhaseAdmitted || !slices.Equal(sorted(visible(p)), ids) {
				return false
			}
		}
		return true
	})
	results, err := podresult.ReadDir(resultsDir(n.rootDir))
	if err != nil {
		n.t.Fatal(err)
	}
	byName := map[string]*podresult.PodResult{}
	for _, r := range results {
		byName[r.Name] = r
	}
	pr := n.podResources()
	for name, ids := range want {
		r := byName[name]
		if r == nil || !slices.Equal(sorted(visible(r)), ids) {
			n.t.Fatalf("pods/*.json of %s says %v, want %v", name, visible(r), ids)
		}
		if got := sorted(pr[name]); !slices.Equal(got, ids) {
			n.t.Fatalf("podresources says %s holds %v, want %v", name, got, ids)
		}
	}
}

// expectCheckpointHolds checks with `kdm inspect` that the checkpoint is valid and assigns each
// named pod exactly its GPUs.
func (n *node) expectCheckpointHolds(want map[string][]string) {
	n.t.Helper()
	cp := filepath.Join(n.pluginDir, checkpoint.FileName)
	if out, err := exec.Command(filepath.Join(binDir, "kdm"), "inspect", cp).CombinedOutput(); err != nil {
		n.t.Fatalf("kdm inspect %s: %v\n%s", cp, err, out)
	}
	raw, err := os.ReadFile(cp)
	if err != nil {
		n.t.Fatal(err)
	}
	data, _, err := checkpoint.Decode(raw)
	if err != nil {
		n.t.Fatal(err)
	}
	got := map[string][]string{}
	for _, e := range data.PodDeviceEntries {
		for _, ids := range e.DeviceIDs {
			got[e.PodUID] = append(got[e.PodUID], ids...)
		}
	}
	for name, ids := range want {
		uid := uidOf(name)
		if g := sorted(got[uid]); !slices.Equal(g, ids) {
			n.t.Fatalf("checkpoint assigns %s %v, want %v", name, g, ids)
		}
	}
}

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kdm-project/kdm/agent"
	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
)

// policies are the two behaviours every hostile-manifest case runs under.
var policies = []string{"kubelet-1.36", "kdm"}

// forEachPolicy runs f as one subtest per policy, each on a fresh node.
func forEachPolicy(t *testing.T, f func(t *testing.T, n *node, policy string)) {
	for _, policy := range policies {
		t.Run(policy, func(t *testing.T) { f(t, newNode(t), policy) })
	}
}

// logCount counts the lines of a process's log that contain every one of words.
func logCount(t *testing.T, p *process, words ...string) int {
	t.Helper()
	data, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, line := range strings.Split(string(data), "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			count++
		}
	}
	return count
}

func admitted(name string, gpus int) func(statusapi.NodeStatus) bool {
	return func(st statusapi.NodeStatus) bool {
		p := pod(st, name)
		return p != nil && p.Phase == podresult.PhaseAdmitted && len(visible(p)) == gpus
	}
}

func decided(name string) func(statusapi.NodeStatus) bool {
	return func(st statusapi.NodeStatus) bool {
		p := pod(st, name)
		return p != nil && (p.Phase == podresult.PhaseAdmitted || p.Phase == podresult.PhaseRejected)
	}
}

// TestManifestRewrittenInPlace (case 1): a manifest truncated and rewritten in place, again and
// again, never releases its pod; a pod created meanwhile gets only the free GPUs.
func TestManifestRewrittenInPlace(t *testing.T) {
	innerLoopSkips(t, "rewrites a manifest in place again and again")
	forEachPolicy(t, func(t *testing.T, n *node, policy string) {
		kdm := n.startWithGPUs(policy)
		body := podManifest("a", uidOf("a"), gpuLimit(2))
		n.placeManifest("a.yaml", body)
		st := n.eventually("pod a admitted", admitted("a", 2))
		aGPUs := sorted(visible(pod(st, "a")))

		// The writer truncates a.yaml, leaves it empty for a moment, then writes it back, as
		// `cat a.yaml > pods/a.yaml` or an editor does; pod b appears while a.yaml is empty.
		path := filepath.Join(n.manifests, "a.yaml")
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(stop)
			for i := 0; i < 8; i++ {
				f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(120 * time.Millisecond)
				if i == 3 {
					n.placeManifest("b.yaml", podManifest("b", uidOf("b"), gpuLimit(6)))
					time.Sleep(200 * time.Millisecond)
				}
				_, werr := f.WriteString(body[:len(body)/2])
				time.Sleep(50 * time.Millisecond)
				_, werr2 := f.WriteString(body[len(body)/2:])
				if err := f.Close(); err != nil || werr != nil || werr2 != nil {
					t.Error(err, werr, werr2)
					return
				}
				time.Sleep(80 * time.Millisecond)
			}
		}()
		var problems []string
	watch:
		for {
			select {
			case <-stop:
				break watch
			default:
			}
			if st, ok := n.status(); ok {
				p := pod(st, "a")
				switch {
				case p == nil:
					problems = append(problems, "pod a vanished from /status")
				case p.Phase != podresult.PhaseAdmitted:
					problems = append(problems, fmt.Sprintf("pod a is %s: %s", p.Phase, p.Message))
				case !slices.Equal(sorted(visible(p)), aGPUs):
					problems = append(problems, fmt.Sprintf("pod a's GPUs changed to %v", visible(p)))
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		wg.Wait()
		if len(problems) > 0 {
			t.Fatalf("while a.yaml was rewritten in place: %v (and %d more)", problems[0], len(problems)-1)
		}
		st = n.eventually("pod b decided", decided("b"))
		if b := pod(st, "b"); b.Phase != podresult.PhaseAdmitted {
			t.Fatalf("pod b (6 of the 6 free GPUs) was %s: %s", b.Phase, b.Message)
		}
		a, b := pod(st, "a"), pod(st, "b")
		if a == nil || a.Phase != podresult.PhaseAdmitted || !slices.Equal(sorted(visible(a)), aGPUs) {
			t.Fatalf("pod a after the rewrites: %+v, want Admitted with %v", a, aGPUs)
		}
		disjointSets(t, map[string][]string{"a": aGPUs, "b": visible(b)})
		pr := n.podResources()
		if !slices.Equal(sorted(pr["a"]), aGPUs) || !slices.Equal(sorted(pr["b"]), sorted(visible(b))) {
			t.Fatalf("podresources %v disagrees with a=%v b=%v", pr, aGPUs, visible(b))
		}
		if c := logCount(t, kdm, "Pod removed", `pod="e2e/a"`); c != 0 {
			t.Fatalf("kdm released pod a %d times", c)
		}
	})
}

// TestManifestMetadataPathTraversal (case 6): pod metadata that would name a path outside
// --root-dir, or an over-long file name, is rejected as invalid and nothing is written
// outside the pods directory.
func TestManifestMetadataPathTraversal(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, n *node, policy string) {
		victimDir := filepath.Join(n.base, "victimdir")
		if err := os.MkdirAll(victimDir, 0o750); err != nil {
			t.Fatal(err)
		}
		victim := filepath.Join(victimDir, "victim.json")
		if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		n.startKdm("--policy", policy)
		n.startPlugin()
		n.eventually("8 GPUs", gpus(8))
		n.placeManifest("traversal.yaml", podManifest("traversal", "/../../../victimdir/victim", gpuLimit(1)))
		long := strings.Repeat("x", 300)
		n.placeManifest("long.yaml", podManifest(long, uidOf("long"), gpuLimit(1)))
		n.placeManifest("ok.yaml", podManifest("ok", uidOf("ok"), gpuLimit(1)))
		st := n.eventually("all three pods decided", func(st statusapi.NodeStatus) bool {
			return decided("traversal")(st) && decided(long)(st) && decided("ok")(st)
		})
		for name, field := range map[string]string{"traversal": "metadata.uid", long: "metadata.name"} {
			p := pod(st, name)
			if p.Phase != podresult.PhaseRejected || p.Reason != agent.ReasonInvalidPod || !strings.Contains(p.Message, field) {
				t.Errorf("pod %.20s…: phase %s reason %q message %q; want Rejected, InvalidPod, naming %s", name, p.Phase, p.Reason, p.Message, field)
			}
			if len(p.Containers) != 0 || len(visible(p)) != 0 {
				t.Errorf("invalid pod %.20s… got devices: %+v", name, p.Containers)
			}
		}
		if ok := pod(st, "ok"); ok.Phase != podresult.PhaseAdmitted {
			t.Fatalf("valid pod ok: %s %s", ok.Phase, ok.Message)
		}
		if pr := n.podResources(); len(pr) != 1 || len(pr["ok"]) != 1 {
			t.Fatalf("podresources lists %v; want only pod ok with 1 GPU", pr)
		}
		if data, err := os.ReadFile(victim); err != nil || string(data) != "precious\n" {
			t.Fatalf("victim file outside --root-dir changed: %q, %v", data, err)
		}
		if entries, _ := os.ReadDir(victimDir); len(entries) != 1 {
			t.Fatalf("files appeared beside the victim: %v", entries)
		}
		// Every result is a plain file directly inside <root-dir>/kdm/pods.
		podsDir := resultsDir(n.rootDir)
		err := filepath.Walk(n.rootDir, func(path string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || !strings.HasSuffix(path, ".json") {
				return err
			}
			if filepath.Dir(path) != podsDir {
				return fmt.Errorf("result file %s outside %s", path, podsDir)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestManifestNonRegularFiles (case 7): a FIFO, a symlink to /dev/zero, a directory and a
// socket in the manifest directory neither block nor exhaust kdm; pods are still admitted and
// SIGTERM still stops it.
func TestManifestNonRegularFiles(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, n *node, policy string) {
		kdm := n.startWithGPUs(policy)
		fifo := filepath.Join(n.manifests, "a-fifo.yaml")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/zero", filepath.Join(n.manifests, "b-zero.yaml")); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(n.manifests, "c-dir.yaml"), 0o750); err != nil {
			t.Fatal(err)
		}
		n.placeManifest("d-pod.yaml", podManifest("d", uidOf("d"), gpuLimit(1)))
		n.eventually("pod d admitted beside the FIFO and /dev/zero", admitted("d", 1))
		// kdm does not hold the FIFO open: a non-blocking writer finds no reader.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
			t.Fatalf("kdm has the FIFO %s open for reading", fifo)
		}
		n.placeManifest("e-pod.yaml", podManifest("e", uidOf("e"), gpuLimit(2)))
		n.eventually("pod e admitted", admitted("e", 2))
		if c := logCount(t, kdm, "not a regular file", "a-fifo.yaml"); c != 1 {
			t.Errorf("the FIFO was reported %d times, want once", c)
		}
		kdm.terminate(t)
	})
}

// TestManifestBadQuantities (case 8): device quantities the kubelet refuses are rejected as
// invalid and get no device.
func TestManifestBadQuantities(t *testing.T) {
	cases := map[string]string{
		"half":         "      limits:\n        nvidia.com/gpu: 0.5\n",
		"milli":        "      limits:\n        nvidia.com/gpu: 500m\n",
		"request-only": "      requests:\n        nvidia.com/gpu: 1\n",
		"unequal":      "      requests:\n        nvidia.com/gpu: 1\n      limits:\n        nvidia.com/gpu: 2\n",
		"negative":     "      limits:\n        nvidia.com/gpu: -1\n",
		"huge":         "      limits:\n        nvidia.com/gpu: 99999999999999999999\n",
	}
	forEachPolicy(t, func(t *testing.T, n *node, policy string) {
		n.startKdm("--policy", policy)
		n.startPlugin()
		n.eventually("8 GPUs", gpus(8))
		for name, res := range cases {
			n.placeManifest(name+".yaml", podManifest(name, uidOf(name), res))
		}
		n.placeManifest("good.yaml", podManifest("good", uidOf("good"), gpuLimit(1)))
		st := n.eventually("every pod decided", func(st statusapi.NodeStatus) bool {
			for name := range cases {
				if !decided(name)(st) {
					return false
				}
			}
			return decided("good")(st)
		})
		for name := range cases {
			p := pod(st, name)
			if p.Phase != podresult.PhaseRejected || p.Reason != agent.ReasonInvalidPod || !strings.Contains(p.Message, "nvidia.com/gpu") {
				t.Errorf("pod %s: phase %s reason %q message %q; want Rejected, InvalidPod, naming nvidia.com/gpu", name, p.Phase, p.Reason, p.Message)
			}
			if len(visible(p)) != 0 {
				t.Errorf("invalid pod %s got GPUs %v", name, visible(p))
			}
		}
		if g := pod(st, "good"); g.Phase != podresult.PhaseAdmitted {
			t.Fatalf("pod good: %s %s", g.Phase, g.Message)
		}
		if pr := n.podResources(); len(pr) != 1 || len(pr["good"]) != 1 {
			t.Fatalf("podresources lists %v; want only pod good with 1 GPU", pr)
		}
	})
}

// TestManifestChangedRequestKeepsAdmission (case 9): an in-place edit that keeps the UID but
// asks for more GPUs keeps the admitted pod with a warning, also across a kdm crash.
func TestManifestChangedRequestKeepsAdmission(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, n *node, policy string) {
		kdm := n.startWithGPUs(policy)
		n.placeManifest("a.yaml", podManifest("a", uidOf("a"), gpuLimit(1)))
		st := n.eventually("pod a admitted with 1 GPU", admitted("a", 1))
		before := visible(pod(st, "a"))

		n.placeManifest("a.yaml", podManifest("a", uidOf("a"), gpuLimit(2)))
		st = n.eventually("pod a warns about its changed request", func(st statusapi.NodeStatus) bool {
			p := pod(st, "a")
			return p != nil && p.Warning != ""
		})
		check := func(st statusapi.NodeStatus, when string) {
			t.Helper()
			p := pod(st, "a")
			if p.Phase != podresult.PhaseAdmitted || !slices.Equal(visible(p), before) || !strings.Contains(p.Warning, "nvidia.com/gpu") {
				t.Fatalf("%s: pod a is %s %q with %v, warning %q; want Admitted with %v and a warning naming nvidia.com/gpu",
					when, p.Phase, p.Message, visible(p), p.Warning, before)
			}
			if pr := n.podResources(); !slices.Equal(pr["a"], before) {
				t.Fatalf("%s: podresources says a holds %v, want %v", when, pr["a"], before)
			}
		}
		check(st, "after the edit")
		// A later directory event does not log the warning again.
		n.placeManifest("other.yaml", podManifest("other", uidOf("other"), gpuLimit(1)))
		n.eventually("pod other admitted", admitted("other", 1))
		if c := logCount(t, kdm, "e2e/a", "nvidia.com/gpu", "changed"); c != 1 {
			t.Errorf("the changed request was logged %d times, want once", c)
		}

		kdm.kill()
		n.startKdm("--policy", policy)
		st = n.eventually("pod a back after the restart", func(st statusapi.NodeStatus) bool {
			p := pod(st, "a")
			return st.Capacity["nvidia.com/gpu"] == 8 && p != nil && p.Phase != podresult.PhasePending && p.Warning != ""
		})
		check(st, "after the restart")
	})
}

// TestManifestParsedAndLoggedOnce (case 11, part): a bad manifest and an oversized one are
// reported once, not again on every directory event or resync.
func TestManifestParsedAndLoggedOnce(t *testing.T) {
	innerLoopSkips(t, "waits out resyncs to see nothing logged again")
	n := newNode(t)
	big, err := os.Create(filepath.Join(n.manifests, "big.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// 50 MB: a comment line repeated, behind a valid pod head.
	if _, err := big.WriteString(podManifest("big", uidOf("big"), gpuLimit(1))); err != nil {
		t.Fatal(err)
	}
	line := []byte("# " + strings.Repeat("x", 1021) + "\n")
	for i := 0; i < 50*1024; i++ {
		if _, err := big.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	if err := big.Close(); err != nil {
		t.Fatal(err)
	}
	n.placeManifest("bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [not, a, map\n")
	kdm := n.startServing("8 GPUs")
	for i := 0; i < 15; i++ {
		name := fmt.Sprintf("p%d", i)
		n.placeManifest(name+".yaml", podManifest(name, uidOf(name), gpuLimit(0)))
		n.eventually("pod "+name+" admitted", func(st statusapi.NodeStatus) bool {
			p := pod(st, name)
			return p != nil && p.Phase == podresult.PhaseAdmitted
		})
	}
	if pod(n.eventually("status", func(statusapi.NodeStatus) bool { return true }), "big") != nil {
		t.Errorf("the 50 MB manifest was admitted")
	}
	if c := logCount(t, kdm, "bad.yaml"); c != 1 {
		t.Errorf("bad.yaml was reported %d times, want once", c)
	}
	if c := logCount(t, kdm, "big.yaml"); c != 1 {
		t.Errorf("big.yaml was reported %d times, want once", c)
	}
	if c := logCount(t, kdm, "big.yaml", "10485760"); c != 1 {
		t.Errorf("big.yaml's report does not name the 10 MiB limit")
	}
}

// noUIDManifest is a one-container pod manifest in namespace e2e without metadata.uid: kdm
// derives the pod's UID from the file's content, so another content is another pod.
func noUIDManifest(name string, gpus int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: e2e
spec:
  containers:
  - name: main
    image: example.com/app
    resources:
%s`, name, gpuLimit(gpus))
}

// slowRewrite rewrites path in place from a shell, as `exec 3>file` does: truncate, write
// half (a valid pod: the containers without their resources), pause, write the rest, close.
// halfWritten runs while the shell pauses, its file still open for writing.
func slowRewrite(t *testing.T, path, body string, pause time.Duration, halfWritten func()) {
	t.Helper()
	cut := strings.Index(body, "    resources:")
	script := `exec 3>"$F"; printf '%s' "$HALF" >&3; echo half; sleep "$PAUSE"; printf '%s' "$REST" >&3; exec 3>&-`
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "F="+path, "HALF="+body[:cut], "REST="+body[cut:],
		fmt.Sprintf("PAUSE=%.1f", pause.Seconds()))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "half\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the writer said %q (%v), want half", line, err)
	}
	halfWritten()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the writer: %v", err)
	}
}

// TestManifestSlowRewriteKeepsPod (issue round 3, item 1): the manifest of a running 2-GPU pod
// without metadata.uid is rewritten in place by a shell whose first write is a valid pod of
// the same name asking for no GPU; it pauses 0.3 s, 1.5 s or 3 s, file open, before writing the
// GPU limits. A 2-GPU pod written during the pause, on a node whose other 6 GPUs are taken,
// must not get the running pod's GPUs, which keeps them, also when kdm is SIGKILLed and started
// again during the pause.
func TestManifestSlowRewriteKeepsPod(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out writers' pauses and the identity settle time (about 20 s); run by make test")
	}
	rounds := []struct {
		name    string
		pause   time.Duration
		restart bool
	}{
		{"pause-0.3s", 300 * time.Millisecond, false},
		{"pause-1.5s", 1500 * time.Millisecond, false},
		{"pause-3s", 3 * time.Second, false},
		{"restart-during-3s-pause", 3 * time.Second, true},
	}
	forEachPolicy(t, func(t *testing.T, n *node, policy string) {
		kdm := n.startWithGPUs(policy)
		for i, r := range rounds {
			a, filler, b, marker := fmt.Sprintf("a%d", i), fmt.Sprintf("filler%d", i), fmt.Sprintf("b%d", i), fmt.Sprintf("marker%d", i)
			body := noUIDManifest(a, 2)
			n.placeManifest(a+".yaml", body)
			n.placeManifest(filler+".yaml", podManifest(filler, uidOf(filler), gpuLimit(6)))
			st := n.eventually(r.name+": "+a+" and "+filler+" admitted", func(st statusapi.NodeStatus) bool {
				return admitted(a, 2)(st) && admitted(filler, 6)(st)
			})
			running, aGPUs := pod(st, a).UID, sorted(visible(pod(st, a)))

			slowRewrite(t, filepath.Join(n.manifests, a+".yaml"), body, r.pause, func() {
				if r.restart {
					kdm.kill()
					kdm = n.startKdm("--policy", policy)
					n.eventually(r.name+": kdm serving again", gpus(8))
				}
				n.placeManifest(b+".yaml", podManifest(b, uidOf(b), gpuLimit(2)))
			})
			n.placeManifest(marker+".yaml", podManifest(marker, uidOf(marker), gpuLimit(0)))
			st = n.eventually(r.name+": "+marker+" admitted and "+b+" decided", func(st statusapi.NodeStatus) bool {
				m := pod(st, marker)
				return m != nil && m.Phase == podresult.PhaseAdmitted && decided(b)(st)
			})
			p := pod(st, a)
			if p == nil || p.UID != running || p.Phase != podresult.PhaseAdmitted || !slices.Equal(sorted(visible(p)), aGPUs) {
				t.Fatalf("%s: pod %s after the slow rewrite: %+v; want %s Admitted with %v", r.name, a, p, running, aGPUs)
			}
			if bp := pod(st, b); bp.Phase != podresult.PhaseRejected || len(visible(bp)) != 0 {
				t.Fatalf("%s: pod %s (2 GPUs, none free) is %s with %v: %s", r.name, b, bp.Phase, visible(bp), bp.Message)
			}
			if pr := n.podResources(); !slices.Equal(sorted(pr[a]), aGPUs) || len(pr[b]) != 0 {
				t.Fatalf("%s: podresources %v, want %s with %v and nothing for %s", r.name, pr, a, aGPUs, b)
			}
			if c := logCount(t, kdm, "Pod removed", `pod="e2e/`+a+`"`); c != 0 {
				t.Fatalf("%s: kdm released pod %s %d times", r.name, a, c)
			}
			for _, name := range []string{a, filler, b, marker} {
				n.deletePod(name)
			}
			n.eventually(r.name+": the round's pods gone", func(st statusapi.NodeStatus) bool {
				return pod(st, a) == nil && pod(st, filler) == nil && pod(st, b) == nil && pod(st, marker) == nil
			})
		}
	})
}

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdm-project/kdm/agent"
	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
)

// TestRacingManifestsSameWinner: three manifests asking 3 of the 8 GPUs each are moved in at
// once, in a different order each run; the same pod (the last by name) is rejected every time.
func TestRacingManifestsSameWinner(t *testing.T) {
	innerLoopSkips(t, "runs three racing rounds of kdm")
	n := newNode(t)
	kdm := n.startServing("8 GPUs")
	names := []string{"race-a", "race-b", "race-c"}
	orders := [][]int{{0, 1, 2}, {2, 1, 0}, {1, 2, 0}, {2, 0, 1}}
	for run := 0; run < 20; run++ {
		staged := t.TempDir()
		for _, name := range names {
			if err := os.WriteFile(filepath.Join(staged, name+".yaml"), []byte(podManifest(name, uidOf(name), gpuLimit(3))), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		for _, i := range orders[run%len(orders)] {
			if err := os.Rename(filepath.Join(staged, names[i]+".yaml"), filepath.Join(n.manifests, names[i]+".yaml")); err != nil {
				t.Fatal(err)
			}
		}
		st := n.eventually("all three decided", func(st statusapi.NodeStatus) bool {
			return decided("race-a")(st) && decided("race-b")(st) && decided("race-c")(st)
		})
		for _, name := range names {
			want := podresult.PhaseAdmitted
			if name == "race-c" {
				want = podresult.PhaseRejected
			}
			if got := pod(st, name).Phase; got != want {
				t.Fatalf("run %d (order %v): %s is %s, want %s", run, orders[run%len(orders)], name, got, want)
			}
		}
		for _, name := range names {
			n.deletePod(name)
		}
		n.eventually("the racers gone", func(st statusapi.NodeStatus) bool {
			return pod(st, "race-a") == nil && pod(st, "race-b") == nil && pod(st, "race-c") == nil
		})
	}
	kdm.terminate(t)
}

// restartWithoutPlugin admits pod "old" (1 GPU) under --policy kdm with extra flags, then kills
// kdm and the plugin and writes the manifest of "waiter" (1 GPU): a new pod that must wait for
// the plugin after the restart. It returns the restarted kdm.
func restartWithoutPlugin(t *testing.T, n *node, extra ...string) *process {
	t.Helper()
	args := append([]string{"--policy", "kdm"}, extra...)
	kdm := n.startKdm(args...)
	n.startPlugin()
	n.eventually("8 GPUs", gpus(8))
	n.writePod("old", 1)
	n.eventually("old admitted", admitted("old", 1))
	kdm.kill()
	n.killPlugins()
	n.writePod("waiter", 1)
	return n.startKdm(args...)
}

// TestWaitingPodHoldsUpNothingElse: at start-up, with pod "waiter" waiting for its plugin, a
// pod without devices is admitted and a removed manifest releases its pod at once; the waiting
// pod is visible as Pending in pods/*.json, /status and the pending gauge.
func TestWaitingPodHoldsUpNothingElse(t *testing.T) {
	n := newNode(t)
	kdm := restartWithoutPlugin(t, n)
	st := n.eventually("waiter pending", func(st statusapi.NodeStatus) bool {
		p := pod(st, "waiter")
		return p != nil && p.Phase == podresult.PhasePending
	})
	if msg := pod(st, "waiter").Message; !strings.Contains(msg, "nvidia.com/gpu") || !strings.Contains(msg, "until") {
		t.Fatalf("pending message %q does not name the resource and the deadline", msg)
	}
	if r := n.resultOf("waiter"); r == nil || r.Phase != podresult.PhasePending || r.Reason != agent.ReasonWaitingForDevicePlugin {
		t.Fatalf("pods/*.json of waiter: %+v, want Pending with reason %s", r, agent.ReasonWaitingForDevicePlugin)
	}
	if v := n.metric("kdm_admission_pending_pods"); v != "1" {
		t.Fatalf("kdm_admission_pending_pods = %q, want 1", v)
	}

	n.placeManifest("nodev.yaml", podManifest("nodev", uidOf("nodev"), "      limits:\n        cpu: 100m\n"))
	n.deletePod("old")
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if st, ok := n.status(); ok {
			if p := pod(st, "nodev"); p != nil && p.Phase == podresult.PhaseAdmitted && pod(st, "old") == nil {
				kdm.terminate(t)
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, _ = n.status()
	t.Fatalf("within a second: nodev %+v, old %+v; want nodev admitted and old released while waiter waits", pod(st, "nodev"), pod(st, "old"))
}

// TestWaitingPodRejectedWhenResourceRemoved: the plugin never comes back; when the grace
// period removes its resource, the waiting pod is rejected at once with a message that says
// so, long before the deferral timeout.
func TestWaitingPodRejectedWhenResourceRemoved(t *testing.T) {
	innerLoopSkips(t, "waits out a grace period")
	n := newNode(t)
	start := time.Now()
	kdm := restartWithoutPlugin(t, n, "--grace-period", "3s", "--defer-admission-timeout", "10m")
	n.eventually("waiter pending", func(st statusapi.NodeStatus) bool {
		p := pod(st, "waiter")
		return p != nil && p.Phase == podresult.PhasePending
	})
	st := n.eventually("waiter rejected", func(st statusapi.NodeStatus) bool {
		p := pod(st, "waiter")
		return p != nil && p.Phase == podresult.PhaseRejected
	})
	if msg := pod(st, "waiter").Message; !strings.Contains(msg, "grace period") {
		t.Fatalf("rejection %q does not say the resource was removed", msg)
	}
	if waited := time.Since(start); waited > time.Minute {
		t.Fatalf("rejected after %v: the removal did not end the wait", waited)
	}
	if v := n.metric("kdm_admission_pending_pods"); v != "0" {
		t.Fatalf("kdm_admission_pending_pods = %q after the rejection, want 0", v)
	}
	kdm.terminate(t)
}

// TestUnregisteredResourceWaitsAtStartup: under --policy kdm a pod asking for a resource no
// plugin has registered yet waits (Pending) and gets its GPU once the plugin registers; a pod
// asking for a resource that never comes is admitted without devices when the start-up window
// ends, with a warning that names the resource. The kubelet policy admits both at once.
func TestUnregisteredResourceWaitsAtStartup(t *testing.T) {
	innerLoopSkips(t, "waits out the start-up window for unregistered resources")
	t.Run("kdm", func(t *testing.T) {
		n := newNode(t)
		kdm := n.startKdm("--policy", "kdm", "--defer-admission-timeout", "4s")
		n.writePod("early", 1)
		n.placeManifest("typo.yaml", podManifest("typo", uidOf("typo"), "      limits:\n        example.com/never: 1\n"))
		n.eventually("early pending", func(st statusapi.NodeStatus) bool {
			p := pod(st, "early")
			return p != nil && p.Phase == podresult.PhasePending
		})
		n.startPlugin()
		n.eventually("early admitted with its GPU", admitted("early", 1))
		n.eventually("typo admitted when the window ends", func(st statusapi.NodeStatus) bool {
			p := pod(st, "typo")
			return p != nil && p.Phase == podresult.PhaseAdmitted
		})
		if logCount(t, kdm, "Warning", "no device plugin has registered", "example.com/never") == 0 {
			t.Fatalf("no warning names example.com/never")
		}
		kdm.terminate(t)
	})
	t.Run("kubelet-1.36", func(t *testing.T) {
		n := newNode(t)
		kdm := n.startKdm()
		n.writePod("early", 1)
		st := n.eventually("early admitted at once", func(st statusapi.NodeStatus) bool {
			p := pod(st, "early")
			return p != nil && p.Phase == podresult.PhaseAdmitted
		})
		if len(visible(pod(st, "early"))) != 0 {
			t.Fatalf("kubelet policy gave early %v before any plugin registered", visible(pod(st, "early")))
		}
		kdm.terminate(t)
	})
}

// resultOf reads the named pod's pods/*.json.
func (n *node) resultOf(name string) *podresult.PodResult {
	n.t.Helper()
	results, err := podresult.ReadDir(resultsDir(n.rootDir))
	if err != nil {
		n.t.Fatal(err)
	}
	for _, r := range results {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// metric returns the value of an unlabelled metric from /metrics, or "" if absent.
func (n *node) metric(name string) string {
	n.t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", n.healthAddr))
	if err != nil {
		n.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/checkpoint"
)

// TestRecoveryConflict replays the attack of two disagreeing records: pods a and b hold one
// GPU each, kdm is killed, the checkpoint emptied and b's pods/*.json edited to claim a's GPU,
// and kdm restarts. a's GPU is claimed by two records, so it stays with both (each result
// names the conflict and the other pod, kdm logs it, `kdm inspect` lists it) and a 7-GPU pod
// gets the other seven GPUs, never a's. b's own GPU, which no record names any more, is free.
// Once b's manifest is deleted, a's result no longer reports a conflict and a keeps its GPU.
func TestRecoveryConflict(t *testing.T) {
	for _, policy := range policies {
		t.Run(policy, func(t *testing.T) {
			n := newNode(t)
			kdm := n.startWithGPUs(policy)
			ga := n.admit("a", 1)[0]
			gb := n.admit("b", 1)[0]
			kdm.kill()

			cp := filepath.Join(n.pluginDir, checkpoint.FileName)
			if err := os.WriteFile(cp, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			n.editRecord("b", gb, ga)
			kdm = n.startKdm("--policy", policy)
			n.eventually("plugin back after the restart", gpus(8))
			n.eventually("a and b admitted again", func(st statusapi.NodeStatus) bool {
				a, b := pod(st, "a"), pod(st, "b")
				return a != nil && b != nil && a.Phase == podresult.PhaseAdmitted && b.Phase == podresult.PhaseAdmitted
			})

			n.writePod("c", 7)
			st := n.eventually("c admitted", func(st statusapi.NodeStatus) bool { return len(visible(pod(st, "c"))) == 7 })
			c := sorted(visible(pod(st, "c")))
			if slices.Contains(c, ga) {
				t.Fatalf("c got %v, including a's contested %s", c, ga)
			}
			n.eventually("a and b report the conflict", func(st statusapi.NodeStatus) bool {
				return conflictNames(pod(st, "a"), ga, "e2e/b") && conflictNames(pod(st, "b"), ga, "e2e/a")
			})
			pr := n.podResources()
			if got := sorted(pr["c"]); !slices.Equal(got, c) || slices.Contains(got, ga) {
				t.Fatalf("podresources gives c %v, want %v without %s", got, c, ga)
			}
			if !slices.Equal(pr["a"], []string{ga}) || !slices.Equal(pr["b"], []string{ga}) {
				t.Fatalf("podresources gives a %v and b %v, want both claiming %s", pr["a"], pr["b"], ga)
			}
			results, err := podresult.ReadDir(resultsDir(n.rootDir))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range results {
				if r.Name == "b" && !conflictNames(r, ga, "e2e/a") {
					t.Fatalf("b's pods/*.json does not report the conflict: %+v", r.Conflicts)
				}
			}
			out, err := exec.Command(filepath.Join(binDir, "kdm"), "inspect", cp).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "CONTESTED: 1 devices") || !strings.Contains(string(out), ga) {
				t.Fatalf("kdm inspect %s (%v) does not list %s as contested:\n%s", cp, err, ga, out)
			}
			if log, _ := os.ReadFile(kdm.log); !strings.Contains(string(log), "Restored assignments of several pods claim one device") {
				t.Fatalf("kdm did not log the contested device")
			}

			n.deletePod("b")
			n.eventually("a's conflict over, its GPU kept", func(st statusapi.NodeStatus) bool {
				a := pod(st, "a")
				return pod(st, "b") == nil && a != nil && len(a.Conflicts) == 0 && slices.Equal(visible(a), []string{ga})
			})
			n.expectHolding(map[string][]string{"a": {ga}, "c": c})
			kdm.terminate(t)
		})
	}
}

// conflictNames reports whether the pod's result says that id is also claimed by other.
func conflictNames(p *podresult.PodResult, id, other string) bool {
	if p == nil || p.Phase != podresult.PhaseAdmitted {
		return false
	}
	for _, c := range p.Conflicts {
		if c.DeviceID == id && slices.Contains(c.Pods, other) {
			return true
		}
	}
	return false
}

// editRecord rewrites the named pod's pods/*.json in place so that its recorded allocations
// name to where they named from, as an operator's or an attacker's edit would.
func (n *node) editRecord(name, from, to string) {
	n.t.Helper()
	dir := resultsDir(n.rootDir)
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		n.t.Fatal(err)
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			n.t.Fatal(err)
		}
		var r map[string]any
		if err := json.Unmarshal(raw, &r); err != nil || r["name"] != name {
			continue
		}
		edited := false
		for _, c := range r["containers"].([]any) {
			allocs, _ := c.(map[string]any)["allocations"].([]any)
			for _, al := range allocs {
				for _, d := range al.(map[string]any)["devices"].([]any) { // [{id, numaNodes}] (docs/pod-results.md)
					if d := d.(map[string]any); d["id"] == from {
						d["id"], edited = to, true
					}
				}
			}
		}
		if !edited {
			n.t.Fatalf("%s's record names no %s", name, from)
		}
		out, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			n.t.Fatal(err)
		}
		if err := os.WriteFile(file, out, 0o600); err != nil {
			n.t.Fatal(err)
		}
		return
	}
	n.t.Fatalf("no pods/*.json for %s", name)
}

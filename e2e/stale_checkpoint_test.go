package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
)

// TestStaleCheckpoint replays a stale but valid checkpoint put in place while kdm is down: it
// was taken while pod old held all 8 GPUs; old was then deleted, a was admitted with one GPU,
// kdm was SIGKILLed and the old checkpoint copied back over the current one. a's record
// (pods/*.json) names its GPU; the checkpoint names it under old, which is gone, and has no
// entry for a. After the restart pods b (7 GPUs) and c (1) arrive.
//
// Under every policy the disagreement is logged, counted in
// kdm_checkpoint_record_disagreements_total and shown by `kdm get devices`. Under --policy kdm
// a keeps its GPU, which goes to no other pod: b gets the other seven, c is rejected, and the
// checkpoint written back says so. Under the kubelet policies the checkpoint is followed, as
// the kubelet does (docs/defects.md): a, for which the checkpoint names nothing, is admitted
// again without its GPU, and once old is collected that GPU goes to b or c.
func TestStaleCheckpoint(t *testing.T) {
	for _, policy := range devicemanager.PolicyNames() {
		t.Run(policy, func(t *testing.T) {
			keeps := policy == devicemanager.KDMPolicyName
			n := newNode(t)
			kdm := n.startWithGPUs(policy)
			n.admit("old", 8)
			cp := filepath.Join(n.pluginDir, checkpoint.FileName)
			stale, err := os.ReadFile(cp)
			if err != nil {
				t.Fatal(err)
			}
			n.deletePod("old")
			n.eventually("old gone, its GPUs free", func(st statusapi.NodeStatus) bool { return pod(st, "old") == nil })
			ga := n.admit("a", 1)[0]
			kdm.kill()
			tmp := filepath.Join(n.base, "stale-checkpoint")
			if err := os.WriteFile(tmp, stale, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, cp); err != nil {
				t.Fatal(err)
			}

			restarted := time.Now()
			kdm = n.startKdm("--policy", policy)
			n.eventually("plugin back after the restart", func(st statusapi.NodeStatus) bool { return st.Capacity["nvidia.com/gpu"] == 8 })
			n.eventually("a admitted again", func(st statusapi.NodeStatus) bool {
				a := pod(st, "a")
				return a != nil && a.Phase != podresult.PhasePending && a.Updated.After(restarted)
			})
			n.writePod("b", 7)
			n.writePod("c", 1)
			st := n.eventually("b and c decided", func(st statusapi.NodeStatus) bool {
				b, c := pod(st, "b"), pod(st, "c")
				return b != nil && c != nil && b.Phase != podresult.PhasePending && c.Phase != podresult.PhasePending &&
					(b.Phase == podresult.PhaseRejected || len(visible(b)) == 7) && (c.Phase == podresult.PhaseRejected || len(visible(c)) == 1)
			})
			var others []string // who, besides a, holds a's GPU
			for _, name := range []string{"b", "c"} {
				if slices.Contains(visible(pod(st, name)), ga) {
					others = append(others, name)
				}
			}
			if keeps {
				if len(others) > 0 {
					t.Fatalf("a's recorded GPU %s was given to %v", ga, others)
				}
				if c := pod(st, "c"); c.Phase != podresult.PhaseRejected || !strings.Contains(c.Message, "Available: 0") {
					t.Fatalf("c is %s (%s), want rejected with Available: 0: a's GPU is not free", c.Phase, c.Message)
				}
				held := map[string][]string{"a": {ga}, "b": sorted(visible(pod(st, "b")))}
				n.expectHolding(held)
				n.expectCheckpointHolds(held)
			} else if len(others) != 1 {
				t.Fatalf("under %s a's GPU %s went to %v; the kubelet follows the stale checkpoint and gives it to one new pod", policy, ga, others)
			}

			if v := n.metric("kdm_checkpoint_record_disagreements_total"); v != "1" {
				t.Errorf("kdm_checkpoint_record_disagreements_total = %q, want 1", v)
			}
			log, err := os.ReadFile(kdm.log)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(log), "Checkpoint disagrees with the pod's own record") || !strings.Contains(string(log), uidOf("a")) {
				t.Errorf("kdm did not log the disagreement about a")
			}
			out := n.kdmGet("devices")
			want := "e2e/a (main) nvidia.com/gpu: recorded " + ga + "; checkpoint: none, recorded devices under " + uidOf("old")
			if !strings.Contains(out, "RecordsDisagree:") || !strings.Contains(out, want) {
				t.Errorf("kdm get devices does not show the disagreement %q:\n%s", want, out)
			}
			if kept := strings.Contains(out, "kept as recorded"); kept != keeps {
				t.Errorf("kdm get devices says kept=%v under %s:\n%s", kept, policy, out)
			}
			kdm.terminate(t)
		})
	}
}

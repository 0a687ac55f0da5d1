package devicemanager

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// TestStaleCheckpointAgainstRecords: a checkpoint that decodes but is stale (it gives g1 and
// g2 to pod old, which is gone, and has nothing for a, whose record names g1) is compared
// with the records under every policy: the disagreement is returned and counted. Under
// KeepRecordedDevices a holds g1, which is contested with old and goes to no new pod, and the
// checkpoint written back says so; otherwise the checkpoint is followed and a holds nothing.
func TestStaleCheckpointAgainstRecords(t *testing.T) {
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			policy, err := ParsePolicy(name)
			if err != nil {
				t.Fatal(err)
			}
			dir := shortDir(t)
			pods := newPodList()
			pods.add(testPod("a", container("c", map[string]int64{gpu: 1})))
			// The stale checkpoint: written by a start that recovered old's record.
			first := testManager(t, dir, Config{}, Sources{RecoveredAllocations: []checkpoint.PodDevicesEntry{recordOf("old", "g1", "g2")}})
			if err := first.Stop(); err != nil {
				t.Fatal(err)
			}

			reg := prometheus.NewRegistry()
			m := testManager(t, dir, Config{Policy: policy, Registerer: reg},
				Sources{ActivePods: pods.active, RecoveredAllocations: []checkpoint.PodDevicesEntry{recordOf("a", "g1")}})
			want := []RecordDisagreement{{PodUID: "a", ContainerName: "c", ResourceName: gpu, Recorded: []string{"g1"}, HeldByOthers: []string{"old"}}}
			if diff := cmp.Diff(want, m.RecordDisagreements()); diff != "" {
				t.Fatalf("disagreements (-want +got):\n%s", diff)
			}
			if got := testutil.ToFloat64(m.metrics.disagreements); got != 1 {
				t.Fatalf("kdm_checkpoint_record_disagreements_total = %v, want 1", got)
			}
			held := sets.List(sets.KeySet(m.GetDevices("a", "c")[gpu]))
			claims := checkpointClaims(t, dir)
			if !policy.KeepRecordedDevices {
				if len(held) != 0 || len(m.Contests()) != 0 || claims["a"] != nil {
					t.Fatalf("a holds %v, contests %v, checkpoint %v: the kubelet follows the checkpoint", held, m.Contests(), claims)
				}
				return
			}
			if !slices.Equal(held, []string{"g1"}) {
				t.Fatalf("a holds %v, want its recorded g1", held)
			}
			if diff := cmp.Diff([]Contest{{Resource: gpu, DeviceID: "g1", PodUIDs: []string{"a", "old"}}}, m.Contests()); diff != "" {
				t.Fatalf("contests (-want +got):\n%s", diff)
			}
			if want := map[string][]string{"a": {"g1"}, "old": {"g1", "g2"}}; !cmp.Equal(claims, want) {
				t.Fatalf("checkpoint written back holds %v, want %v", claims, want)
			}
		})
	}
}

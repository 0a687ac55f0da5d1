package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
)

// TestAdmissionMetrics: kdm_admissions_total counts each admission's outcome once: a pod
// admitted, one rejected by the device manager, one whose manifest is invalid; the per-resource
// gauges of the device manager are served from the same registry.
func TestAdmissionMetrics(t *testing.T) {
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	a, _ := f.runWith(Config{PodManifestPath: f.pods, Registry: reg})
	f.plugin("g0", "g1")
	f.waitFor(a, "2 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	f.manifest("fits", 2)
	f.waitFor(a, "fits admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "fits")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	f.manifest("nofit", 1)
	f.waitFor(a, "nofit rejected", func(st statusapi.NodeStatus) bool {
		p := phase(st, "nofit")
		return p != nil && p.Phase == podresult.PhaseRejected
	})
	bad := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Bad_Name\nspec:\n  containers:\n  - name: main\n    image: x\n"
	if err := os.WriteFile(filepath.Join(f.pods, "bad.yaml"), []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	f.waitFor(a, "bad rejected", func(st statusapi.NodeStatus) bool {
		for _, p := range st.Pods {
			if p.Reason == ReasonInvalidPod {
				return true
			}
		}
		return false
	})
	want := `# HELP kdm_admissions_total Pod admissions by outcome: admitted, rejected (by the device manager) or invalid (the manifest failed validation).
# TYPE kdm_admissions_total counter
kdm_admissions_total{result="admitted"} 1
kdm_admissions_total{result="invalid"} 1
kdm_admissions_total{result="rejected"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kdm_admissions_total"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "kdm_resource_allocatable", "kdm_plugin_up"); err != nil || n != 2 {
		t.Fatalf("device manager gauges on the agent's registry: %d series, %v; want 2", n, err)
	}
}

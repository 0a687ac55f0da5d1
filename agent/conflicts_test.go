package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/checkpoint"
)

// TestRecoveryConflictInPodResults: with the checkpoint lost and b's result edited to claim
// a's device, both pods keep their claims: their results (file and /status) name the contested
// device and the other pod, a new pod gets only unclaimed devices, and once b's manifest is
// gone a's result no longer reports a conflict.
func TestRecoveryConflictInPodResults(t *testing.T) {
	f := newFixture(t)
	a, stop := f.run()
	f.plugin("g0", "g1", "g2", "g3")
	f.waitFor(a, "4 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 4 })
	f.manifest("a", 1)
	f.manifest("b", 1)
	st := f.waitFor(a, "a and b admitted", func(st statusapi.NodeStatus) bool {
		return len(devicesOf(phase(st, "a"))) == 1 && len(devicesOf(phase(st, "b"))) == 1
	})
	ga := devicesOf(phase(st, "a"))[0]
	stop()

	if err := os.Remove(filepath.Join(f.plugins, checkpoint.FileName)); err != nil {
		t.Fatal(err)
	}
	claimInResult(t, a.cfg.PodsDir(), "b", ga)

	a, _ = f.run()
	st = f.waitFor(a, "a and b admitted with the conflict", func(st statusapi.NodeStatus) bool {
		pa, pb := phase(st, "a"), phase(st, "b")
		return pa != nil && pb != nil && len(pa.Conflicts) == 1 && len(pb.Conflicts) == 1
	})
	want := podresult.DeviceConflict{Resource: "example.com/gpu", DeviceID: ga, Pods: []string{"default/b"}}
	if got := phase(st, "a").Conflicts[0]; !equalConflicts([]podresult.DeviceConflict{got}, []podresult.DeviceConflict{want}) {
		t.Fatalf("a's conflict %+v, want %+v", got, want)
	}
	if w := phase(st, "b").ConflictWarning(); !strings.Contains(w, ga) || !strings.Contains(w, "default/a") {
		t.Fatalf("b's warning %q does not name %s and default/a", w, ga)
	}
	files, err := podresult.ReadDir(a.cfg.PodsDir())
	if err != nil {
		t.Fatal(err)
	}
	if r := files[phase(st, "b").UID]; r == nil || len(r.Conflicts) != 1 || r.Conflicts[0].DeviceID != ga {
		t.Fatalf("b's result file does not report the conflict: %+v", r)
	}

	f.manifest("c", 3)
	st = f.waitFor(a, "c admitted", func(st statusapi.NodeStatus) bool { return len(devicesOf(phase(st, "c"))) == 3 })
	if got := devicesOf(phase(st, "c")); slices.Contains(got, ga) {
		t.Fatalf("c got the contested %s: %v", ga, got)
	}

	if err := os.Remove(filepath.Join(f.pods, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	f.waitFor(a, "a's conflict over", func(st statusapi.NodeStatus) bool {
		pa := phase(st, "a")
		return phase(st, "b") == nil && pa != nil && len(pa.Conflicts) == 0 && slices.Equal(devicesOf(pa), []string{ga})
	})
}

// devicesOf lists the devices a pod's containers hold, sorted.
func devicesOf(r *podresult.PodResult) []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, c := range r.Containers {
		for _, ids := range c.Devices() {
			out = append(out, ids...)
		}
	}
	slices.Sort(out)
	return out
}

// claimInResult rewrites the result file of the named pod so that its recorded allocations
// name id instead of their devices.
func claimInResult(t *testing.T, dir, name, id string) {
	t.Helper()
	results, err := podresult.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Name != name {
			continue
		}
		for i := range r.Containers {
			for j := range r.Containers[i].Allocations {
				r.Containers[i].Allocations[j].DeviceIDs = checkpoint.DevicesPerNUMA{-1: {id}}
			}
		}
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(podresult.Path(dir, podresult.PodOf(r)), raw, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no result for %s", name)
}

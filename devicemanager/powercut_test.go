package devicemanager

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/internal/powercut"
)

// A cutScenario is a start state (setup) and an operation on it (op) that the power-cut suite
// runs again and again with the power cut after each counted file-system op of op.
type cutScenario struct {
	name  string
	setup func(r *cutRun)
	op    func(r *cutRun)
	// plain runs the manager with Config.PlainCheckpointWrites (a new file per write, as
	// on systems without renameat2).
	plain bool
}

var cutScenarios = append(spareScenarios, plainScenarios()...)

// plainScenarios are the allocate and health scenarios with plain checkpoint writes.
func plainScenarios() []cutScenario {
	var out []cutScenario
	for _, sc := range spareScenarios {
		if sc.name == "allocate" || sc.name == "health" {
			sc.name += ",plain"
			sc.plain = true
			out = append(out, sc)
		}
	}
	return out
}

// spareScenarios run the manager with its default checkpoint writes (on Linux, through the
// spare).
var spareScenarios = []cutScenario{
	{
		name:  "allocate",
		setup: func(r *cutRun) { r.allocate("p1", 2) },
		op:    func(r *cutRun) { r.allocate("p2", 1) },
	},
	{
		// A departed pod's devices are collected and given to the next pod.
		name: "gc",
		setup: func(r *cutRun) {
			r.allocate("p1", 4)
			r.allocate("p2", 2)
		},
		op: func(r *cutRun) {
			r.pods.remove("p1")
			delete(r.returned, "p1/c")
			r.m.UpdateAllocatedDevices()
			if !r.cutted() {
				r.removed["p1/c"] = true
			}
			r.allocate("p3", 5)
		},
	},
	{
		// Health flips ask for no directory sync (through the spare the store syncs anyway);
		// the allocations between them must still be durable when they return.
		name:  "health",
		setup: func(r *cutRun) { r.allocate("p1", 1) },
		op: func(r *cutRun) {
			r.setHealth("g7", pluginapi.Unhealthy, cutDevices-1)
			r.setHealth("g6", pluginapi.Unhealthy, cutDevices-2)
			r.allocate("p2", 1)
			r.setHealth("g7", pluginapi.Healthy, cutDevices-1)
			r.setHealth("g5", pluginapi.Unhealthy, cutDevices-2)
			r.allocate("p3", 1)
		},
	},
	{
		// The manager restarts on the same disk (its start-up cleanup and the plugin's
		// re-registration write there) and admits a pod.
		name: "restore",
		setup: func(r *cutRun) {
			r.allocate("p1", 2)
			r.allocate("p2", 2)
		},
		op: func(r *cutRun) {
			_ = r.m.Stop()
			r.m = nil
			m, err := startCutManager(r.t, r.policy, r.fs.Dir(), r.pods, r.plain)
			if err != nil {
				if !r.cutted() {
					r.t.Fatalf("restart before any cut: %v", err)
				}
				return
			}
			r.m = m
			if r.waitOrCut("re-registration", func() bool { return capacityIs(m, gpu, cutDevices, cutDevices) }) {
				r.allocate("p3", 3)
			}
		},
	},
}

// waitOrCut waits until cond holds (true) or the power is cut (false).
func (r *cutRun) waitOrCut(what string, cond func() bool) bool {
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		r.m.mu.Lock()
		changed := r.m.deviceChange
		r.m.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-changed:
		case <-r.fs.Cutting():
			return false
		case <-deadline.C:
			c, a, _ := r.m.GetCapacity()
			ops := r.fs.Ops()
			r.t.Fatalf("timed out waiting for %s: capacity %v, allocatable %v; the file system's last ops (%d in all): %q",
				what, c, a, ops, r.fs.Log(max(0, ops-8)))
		}
	}
}

// TestPowerCut runs each scenario under every policy once to count the file-system ops of
// its operation (n), then again from the same start for k = 1..n with the power cut right
// after op k, and each time restarts a manager on what the disk kept. Every allocation whose
// Allocate returned before the cut must be restored exactly, no allocation whose garbage
// collection returned may come back, the checkpoint must decode (nothing torn), and no device
// may be assigned to two pods.
func TestPowerCut(t *testing.T) {
	powercut.SkipUnlessAvailable(t)
	for _, policy := range PolicyNames() {
		for _, sc := range cutScenarios {
			t.Run(policy+"/"+sc.name, func(t *testing.T) {
				res := runCut(t, policy, sc, cutOpts{})
				if len(res.problems) > 0 {
					t.Errorf("cut right after the operation returned: %s", strings.Join(res.problems, "; "))
				}
				n := res.ops
				if n == 0 {
					t.Fatal("the operation made no file-system op")
				}
				step := 1
				if testing.Short() {
					step = 3
				}
				for k := 1; k <= n; k += step {
					for _, wb := range []bool{false, true} {
						res := runCut(t, policy, sc, cutOpts{after: k, writeBack: wb})
						if len(res.problems) > 0 {
							t.Errorf("cut after op %d of %d (%s; write-back %v): %s", k, n, res.last, wb, strings.Join(res.problems, "; "))
						}
					}
				}
				t.Logf("%d cut points, ops: %s", n, strings.Join(res.log, " | "))
			})
		}
	}
}

// TestPowerCutCatchesMissingSyncs shows that the suite's checks can fail: with the directory
// syncs (or the file syncs) of the operation made ineffective, a cut right after Allocate
// returned loses the allocation, under every policy.
func TestPowerCutCatchesMissingSyncs(t *testing.T) {
	powercut.SkipUnlessAvailable(t)
	for _, policy := range PolicyNames() {
		for _, drop := range []string{"dir", "file"} {
			t.Run(policy+"/"+drop, func(t *testing.T) {
				res := runCut(t, policy, cutScenarios[0], cutOpts{dropFileSyncs: drop == "file", dropDirSyncs: drop == "dir"})
				want := "lost the allocation of p2/c"
				if !slices.ContainsFunc(res.problems, func(p string) bool { return strings.HasPrefix(p, want) }) {
					t.Fatalf("with the %s syncs dropped the check found %q, want %q", drop, res.problems, want)
				}
				t.Logf("with the %s syncs dropped: %s", drop, strings.Join(res.problems, "; "))
			})
		}
	}
}

// TestPowerCutCheckReports shows the restart check's other findings on disks made to hold
// them: a torn checkpoint (cut short), which does not decode and is quarantined; a stale one,
// which still holds an allocation whose garbage collection returned; and one that gives a
// device to two pods.
func TestPowerCutCheckReports(t *testing.T) {
	entry := func(pod, dev string) checkpoint.PodDevicesEntry {
		return checkpoint.PodDevicesEntry{PodUID: pod, ContainerName: "c", ResourceName: gpu,
			DeviceIDs: checkpoint.DevicesPerNUMA{-1: {dev}}, AllocResp: []byte{}}
	}
	whole, err := checkpoint.Encode(&checkpoint.Data{
		PodDeviceEntries:  []checkpoint.PodDevicesEntry{entry("p1", "g0")},
		RegisteredDevices: map[string][]string{gpu: {"g0", "g1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	shared, err := checkpoint.Encode(&checkpoint.Data{
		PodDeviceEntries:  []checkpoint.PodDevicesEntry{entry("p1", "g0"), entry("p2", "g0")},
		RegisteredDevices: map[string][]string{gpu: {"g0", "g1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		file      []byte
		collected bool // p1's allocation was garbage-collected rather than returned
		want      []string
	}{
		{"whole", whole, false, nil},
		{"torn", whole[:len(whole)/2], false, []string{"the checkpoint does not decode", "lost the allocation of p1/c", "the restart quarantined"}},
		{"stale", whole, true, []string{"brought back the collected allocation of p1/c"}},
		{"shared", shared, false, []string{"device " + gpu + "/g0 is assigned to pods p1 and p2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := shortDir(t)
			if err := os.WriteFile(filepath.Join(src, checkpoint.FileName), tc.file, 0o600); err != nil {
				t.Fatal(err)
			}
			img, err := powercut.ImageOf(src)
			if err != nil {
				t.Fatal(err)
			}
			pods := newPodList()
			pods.add(testPod("p1", container("c", map[string]int64{gpu: 1})))
			r := &cutRun{t: t, policy: KDMPolicyName, pods: pods, returned: map[string]string{"p1/c": "g0"}}
			if tc.collected {
				r.returned, r.removed = nil, map[string]bool{"p1/c": true}
			}
			problems := r.checkRestart(img)
			if len(problems) != len(tc.want) {
				t.Fatalf("the check found %q, want %q", problems, tc.want)
			}
			for i, want := range tc.want {
				if !strings.HasPrefix(problems[i], want) {
					t.Errorf("finding %d is %q, want %q", i, problems[i], want)
				}
			}
		})
	}
}

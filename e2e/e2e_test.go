package e2e

import (
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/checkpoint"
)

func disjointSets(t *testing.T, byPod map[string][]string) {
	t.Helper()
	owner := map[string]string{}
	for p, ids := range byPod {
		for _, id := range ids {
			if prev, ok := owner[id]; ok && prev != p {
				t.Fatalf("GPU %s held by both %s and %s", id, prev, p)
			}
			owner[id] = p
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// TestNodeLifecycle runs kdm and the NVML plugin (mock DGX A100) as processes and walks the
// node through admissions, a kdm crash, a plugin crash, and a GPU's health flipping.
func TestNodeLifecycle(t *testing.T) {
	n := newNode(t)
	kdm := n.startServing("8 GPUs")

	n.writePod("a", 2)
	n.writePod("b", 2)
	st := n.eventually("pods a and b admitted", func(st statusapi.NodeStatus) bool {
		return len(visible(pod(st, "a"))) == 2 && len(visible(pod(st, "b"))) == 2
	})
	a, b := sorted(visible(pod(st, "a"))), sorted(visible(pod(st, "b")))
	disjointSets(t, map[string][]string{"a": a, "b": b})
	pr := n.podResources()
	if !slices.Equal(sorted(pr["a"]), a) || !slices.Equal(sorted(pr["b"]), b) {
		t.Fatalf("podresources %v disagrees with NVIDIA_VISIBLE_DEVICES a=%v b=%v", pr, a, b)
	}

	// kdm crashes and comes back: the plugin re-registers by itself, the pods keep their GPUs.
	kdm.kill()
	kdm = n.startKdm()
	n.eventually("plugin re-registered after kdm restart", gpus(8))
	pr = n.podResources()
	if !slices.Equal(sorted(pr["a"]), a) || !slices.Equal(sorted(pr["b"]), b) {
		t.Fatalf("after the kdm restart podresources says %v, want a=%v b=%v", pr, a, b)
	}
	n.writePod("c", 4)
	st = n.eventually("pod c admitted", func(st statusapi.NodeStatus) bool { return len(visible(pod(st, "c"))) == 4 })
	c := sorted(visible(pod(st, "c")))
	disjointSets(t, map[string][]string{"a": a, "b": b, "c": c})

	// The plugin crashes: allocatable drops to 0 at once, capacity stays; its restart restores it.
	plugin := n.startPluginAndKillPrevious(t)
	_ = plugin

	// A GPU held by pod a turns unhealthy: allocatable 7 and a's status shows it; then healthy again.
	sick := a[0]
	n.setHealth(sick, "Unhealthy")
	n.eventually("allocatable 7 after a GPU failed", gpus(7))
	n.eventually("pod a's status shows the unhealthy GPU", func(st statusapi.NodeStatus) bool {
		return healthOf(pod(st, "a"), sick) == v1.ResourceHealthStatusUnhealthy
	})
	n.setHealth(sick, "Healthy")
	n.eventually("allocatable back to 8", gpus(8))
	n.eventually("pod a's status shows the GPU healthy", func(st statusapi.NodeStatus) bool {
		return healthOf(pod(st, "a"), sick) == v1.ResourceHealthStatusHealthy
	})

	// Deleting a pod frees its GPUs for the next one.
	n.deletePod("c")
	n.writePod("d", 4)
	st = n.eventually("pod d admitted with c's GPUs", func(st statusapi.NodeStatus) bool { return len(visible(pod(st, "d"))) == 4 })
	if d := sorted(visible(pod(st, "d"))); !slices.Equal(d, c) {
		t.Fatalf("pod d got %v, want the freed %v", d, c)
	}
	kdm.terminate(t)
}

// startPluginAndKillPrevious kills every running plugin process of the node, checks the
// resource's allocatable drops to 0 with capacity kept, and starts a new plugin.
func (n *node) startPluginAndKillPrevious(t *testing.T) *process {
	t.Helper()
	n.killPlugins()
	n.eventually("allocatable 0 while the plugin is down", func(st statusapi.NodeStatus) bool {
		return st.Capacity["nvidia.com/gpu"] == 8 && st.Allocatable["nvidia.com/gpu"] == 0
	})
	p := n.startPlugin()
	n.eventually("plugin back", gpus(8))
	return p
}

func healthOf(p *podresult.PodResult, id string) v1.ResourceHealthStatus {
	if p == nil {
		return ""
	}
	for _, c := range p.Containers {
		for _, rs := range c.AllocatedResourcesStatus {
			for _, r := range rs.Resources {
				if string(r.ResourceID) == id {
					return r.Health
				}
			}
		}
	}
	return ""
}

// TestKillDuringStartup admits and deletes pods for 100 rounds while kdm is SIGKILLed at random
// moments of its start. After each kill the checkpoint decodes and no GPU is held by two pods.
// TestCrashLoop (crashloop_test.go) is the systematic check across policies.
func TestKillDuringStartup(t *testing.T) {
	if testing.Short() {
		t.Skip("crash loop: kills kdm 100 times; run by make test")
	}
	n := newNode(t)
	n.startPlugin()
	r := rand.New(rand.NewSource(time.Now().UnixNano()))
	live := map[string]bool{}
	for round := 0; round < 100; round++ {
		kdm := n.startKdm()
		// Change the pod set a little while kdm starts and admits.
		name := string(rune('a'+round%8)) + "x"
		if live[name] {
			n.deletePod(name)
			delete(live, name)
		} else {
			n.writePod(name, 1+r.Intn(2))
			live[name] = true
		}
		time.Sleep(time.Duration(r.Intn(150)) * time.Millisecond)
		kdm.kill()

		raw, err := os.ReadFile(filepath.Join(n.pluginDir, checkpoint.FileName))
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			t.Fatalf("round %d: %v", round, err)
		}
		data, _, err := checkpoint.Decode(raw)
		if err != nil {
			t.Fatalf("round %d: checkpoint does not decode: %v", round, err)
		}
		owner := map[string]string{}
		for _, e := range data.PodDeviceEntries {
			for _, ids := range e.DeviceIDs {
				for _, id := range ids {
					if prev, ok := owner[id]; ok && prev != e.PodUID {
						t.Fatalf("round %d: GPU %s held by pods %s and %s", round, id, prev, e.PodUID)
					}
					owner[id] = e.PodUID
				}
			}
		}
	}
	// A last, undisturbed run admits what fits and agrees with podresources.
	kdm := n.startKdm()
	n.eventually("GPUs after the crash loop", gpus8OrAllocated)
	disjointSets(t, n.podResources())
	kdm.terminate(t)
}

func gpus8OrAllocated(st statusapi.NodeStatus) bool { return st.Capacity["nvidia.com/gpu"] == 8 }

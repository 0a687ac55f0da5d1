package devicemanager

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
)

// recordOf is an embedder record: the pod's container "c" holds ids of gpu.
func recordOf(pod string, ids ...string) checkpoint.PodDevicesEntry {
	return checkpoint.PodDevicesEntry{PodUID: pod, ContainerName: "c", ResourceName: gpu,
		DeviceIDs: checkpoint.DevicesPerNUMA{-1: ids}, AllocResp: []byte{}}
}

// TestRecoveryKeepsContestedDevices: with the checkpoint lost, records of two pods that claim
// one device (b's record edited to name a's g1) keep every claim, under both policies. The
// contested device is allocated to no new pod, the uncontested devices stay with their
// owners, the checkpoint keeps both claims (so a restart with it finds the contest again), and
// once b is gone the device is a's alone: a is named on Updates and the contest is over. A
// device whose claimants are all gone is free.
func TestRecoveryKeepsContestedDevices(t *testing.T) {
	for _, policy := range []struct {
		name string
		p    Policy
	}{{"kubelet-1.36", KubeletPolicy()}, {"kdm", KDMPolicy()}} {
		t.Run(policy.name, func(t *testing.T) {
			dir := shortDir(t)
			pods := newPodList()
			for _, uid := range []string{"a", "b", "c"} {
				pods.add(testPod(uid, container("c", map[string]int64{gpu: 2})))
			}
			records := []checkpoint.PodDevicesEntry{
				recordOf("a", "g1", "g2"), recordOf("b", "g1", "g3"), recordOf("c", "g4"),
			}
			m := testManager(t, dir, Config{Policy: policy.p}, Sources{ActivePods: pods.active, RecoveredAllocations: records})
			want := []Contest{{Resource: gpu, DeviceID: "g1", PodUIDs: []string{"a", "b"}}}
			if diff := cmp.Diff(want, m.Contests()); diff != "" {
				t.Fatalf("contests after recovery (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want, m.ContestsOf("b")); diff != "" {
				t.Fatalf("b's contests (-want +got):\n%s", diff)
			}
			if got := m.ContestsOf("c"); len(got) != 0 {
				t.Fatalf("c claims nothing contested, got %v", got)
			}
			for pod, ids := range map[string][]string{"a": {"g1", "g2"}, "b": {"g1", "g3"}, "c": {"g4"}} {
				if got := sets.List(sets.KeySet(m.GetDevices(pod, "c")[gpu])); !slices.Equal(got, ids) {
					t.Fatalf("%s holds %v after recovery, want %v", pod, got, ids)
				}
			}
			if got := checkpointClaims(t, dir); !cmp.Equal(got, map[string][]string{"a": {"g1", "g2"}, "b": {"g1", "g3"}, "c": {"g4"}}) {
				t.Fatalf("checkpoint after recovery holds %v, want every record's claims", got)
			}

			testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2", "g3", "g4", "g5", "g6"), envAllocator("GPU"))
			waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, 6, 6) })
			greedy := testPod("greedy", container("c", map[string]int64{gpu: 3}))
			pods.add(greedy)
			if err := m.Allocate(context.Background(), greedy, &greedy.Spec.Containers[0]); err == nil ||
				!strings.Contains(err.Error(), "Requested: 3, Available: 2") {
				t.Fatalf("a 3-GPU pod with g5 and g6 free: %v, want the kubelet's Available: 2", err)
			}
			pods.remove("greedy")
			got := allocateOne(t, m, pods, "d", 2)
			if want := []string{"g5", "g6"}; !slices.Equal(got, want) {
				t.Fatalf("d got %v, want the free %v", got, want)
			}

			// b goes: the contest ends, g1 stays a's, b's g3 is free.
			updates := drain(m.Updates())
			pods.remove("b")
			m.UpdateAllocatedDevices()
			select {
			case u := <-m.Updates():
				if !slices.Equal(u.PodUIDs, []string{"a"}) {
					t.Fatalf("update after b left names %v, want [a]", u.PodUIDs)
				}
			case <-time.After(waitTimeout):
				t.Fatalf("no update for a once b left (drained before: %v)", updates)
			}
			if got := m.Contests(); len(got) != 0 {
				t.Fatalf("contests after b left: %v, want none", got)
			}
			if got := allocateOne(t, m, pods, "e", 1); !slices.Equal(got, []string{"g3"}) {
				t.Fatalf("e got %v, want b's uncontested g3", got)
			}
			if _, ok := m.GetDevices("a", "c")[gpu]["g1"]; !ok {
				t.Fatalf("a lost g1 when b left: %v", m.GetDevices("a", "c"))
			}

			// a goes too: g1 and g2 are free.
			pods.remove("a")
			if got := allocateOne(t, m, pods, "f", 2); !slices.Equal(got, []string{"g1", "g2"}) {
				t.Fatalf("f got %v, want a's g1 and g2", got)
			}
		})
	}
}

// TestContestFoundAgainAfterRestart: the checkpoint written after a contested recovery names
// the device under both pods, so a restart that reads it keeps the contest.
func TestContestFoundAgainAfterRestart(t *testing.T) {
	dir := shortDir(t)
	pods := newPodList()
	pods.add(testPod("a", container("c", map[string]int64{gpu: 1})))
	pods.add(testPod("b", container("c", map[string]int64{gpu: 1})))
	first := testManager(t, dir, Config{}, Sources{ActivePods: pods.active,
		RecoveredAllocations: []checkpoint.PodDevicesEntry{recordOf("a", "g1"), recordOf("b", "g1")}})
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	m := testManager(t, dir, Config{}, Sources{ActivePods: pods.active})
	want := []Contest{{Resource: gpu, DeviceID: "g1", PodUIDs: []string{"a", "b"}}}
	if diff := cmp.Diff(want, m.Contests()); diff != "" {
		t.Fatalf("contests after a restart from the checkpoint (-want +got):\n%s", diff)
	}
	testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"), envAllocator("GPU"))
	waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, 2, 2) })
	if got := allocateOne(t, m, pods, "d", 1); !slices.Equal(got, []string{"g2"}) {
		t.Fatalf("d got %v, want g2: g1 is contested", got)
	}
}

// allocateOne admits a one-container pod asking for n GPUs and returns its devices, sorted.
func allocateOne(t *testing.T, m *Manager, pods *podList, uid string, n int64) []string {
	t.Helper()
	p := testPod(uid, container("c", map[string]int64{gpu: n}))
	pods.add(p)
	if err := m.Allocate(context.Background(), p, &p.Spec.Containers[0]); err != nil {
		t.Fatalf("allocating %d GPUs to %s: %v", n, uid, err)
	}
	return sets.List(sets.KeySet(m.GetDevices(uid, "c")[gpu]))
}

// drain empties ch and returns what it held.
func drain(ch <-chan Update) []Update {
	var out []Update
	for {
		select {
		case u := <-ch:
			out = append(out, u)
		default:
			return out
		}
	}
}

// checkpointClaims reads the checkpoint in dir: pod UID → the device IDs its entries name, sorted.
func checkpointClaims(t *testing.T, dir string) map[string][]string {
	t.Helper()
	store, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	data, _, err := store.Read()
	if err != nil {
		t.Fatalf("reading %s: %v", filepath.Join(dir, checkpoint.FileName), err)
	}
	out := map[string][]string{}
	for _, e := range data.PodDeviceEntries {
		for _, ids := range e.DeviceIDs {
			out[e.PodUID] = append(out[e.PodUID], ids...)
		}
	}
	for pod := range out {
		slices.Sort(out[pod])
	}
	return out
}

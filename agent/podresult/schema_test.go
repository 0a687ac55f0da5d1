package podresult

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
)

// schemaFixture is a pod result using every part of the schema: an init container and an
// app container sharing two GPUs, one with two NUMA nodes, a NIC without topology, run
// options of every kind, health, requests and a contested device.
func schemaFixture(t *testing.T) *PodResult {
	t.Helper()
	gpuResp, err := proto.Marshal(&pluginapi.ContainerAllocateResponse{
		Envs:        map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1"},
		Mounts:      []*pluginapi.Mount{{ContainerPath: "/usr/lib/nvidia", HostPath: "/opt/nvidia/lib", ReadOnly: true}},
		Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/nvidia0", HostPath: "/dev/nvidia0", Permissions: "rw"}},
		Annotations: map[string]string{"cdi.k8s.io/gpu": "nvidia.com/gpu=0"},
		CdiDevices:  []*pluginapi.CDIDevice{{Name: "nvidia.com/gpu=GPU-1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	nicResp, err := proto.Marshal(&pluginapi.ContainerAllocateResponse{Envs: map[string]string{"NIC": "nic-a"}})
	if err != nil {
		t.Fatal(err)
	}
	gpus := func() Allocation {
		return Allocation{Resource: "nvidia.com/gpu", DeviceIDs: checkpoint.DevicesPerNUMA{0: {"GPU-0", "GPU-1"}, 1: {"GPU-1"}},
			AllocResp: gpuResp}
	}
	runOpts := &devicemanager.RunContainerOptions{
		Envs:        []devicemanager.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "GPU-0,GPU-1"}},
		Devices:     []devicemanager.DeviceInfo{{PathOnHost: "/dev/nvidia0", PathInContainer: "/dev/nvidia0", Permissions: "rw"}},
		Mounts:      []devicemanager.Mount{{Name: "/usr/lib/nvidia", ContainerPath: "/usr/lib/nvidia", HostPath: "/opt/nvidia/lib", ReadOnly: true}},
		Annotations: []devicemanager.Annotation{{Name: "cdi.k8s.io/gpu", Value: "nvidia.com/gpu=0"}},
		CDIDevices:  []devicemanager.CDIDevice{{Name: "nvidia.com/gpu=GPU-1"}},
	}
	return &PodResult{
		Namespace: "ml", Name: "training", UID: "6f1c2a9e-0000-4000-8000-000000000001", Phase: PhaseAdmitted,
		Warning:   "kept the devices of the admitted version",
		Conflicts: []DeviceConflict{{Resource: "nvidia.com/gpu", DeviceID: "GPU-1", Pods: []string{"ml/other"}}},
		Updated:   time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC),
		Containers: []ContainerResult{
			{Name: "setup", Init: true, RunOptions: runOpts, Requests: map[string]int64{"nvidia.com/gpu": 2},
				Allocations: []Allocation{gpus()}},
			{Name: "train", RunOptions: runOpts,
				AllocatedResourcesStatus: []v1.ResourceStatus{{Name: "nvidia.com/gpu", Resources: []v1.ResourceHealth{
					{ResourceID: "GPU-0", Health: v1.ResourceHealthStatusHealthy},
					{ResourceID: "GPU-1", Health: v1.ResourceHealthStatusUnhealthy}}}},
				Requests: map[string]int64{"nvidia.com/gpu": 2, "example.com/nic": 1},
				Allocations: []Allocation{gpus(),
					{Resource: "example.com/nic", DeviceIDs: checkpoint.DevicesPerNUMA{-1: {"nic-a"}}, AllocResp: nicResp}}},
		},
	}
}

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata")

// TestPodResultGolden keeps the pod result schema stable: a fixed result, written as
// Write writes it, matches testdata/podresult-v1.golden byte for byte (go test -update
// rewrites it; docs/pod-results.md must then say what changed), and reads back as it was.
func TestPodResultGolden(t *testing.T) {
	want := schemaFixture(t)
	dir := t.TempDir()
	if err := Write(dir, PodOf(want), want); err != nil {
		t.Fatal(err)
	}
	path := Path(dir, PodOf(want))
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "podresult-v1.golden")
	if *updateGolden {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantText, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(wantText) {
		t.Errorf("pod result JSON differs from %s (go test -run TestPodResultGolden -update rewrites it):\n%s", golden, got)
	}
	for _, key := range []string{`"Envs"`, `"PathOnHost"`, `"CDIDevices"`, `"deviceIDs"`, `"allocResp"`, `"-1"`} {
		if strings.Contains(string(got), key) {
			t.Errorf("the v1 schema holds %s", key)
		}
	}
	read, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	assertSameResult(t, read, want)
}

// TestPodResultReadsUnversioned: a result file written by kdm before the schema had a version
// (testdata/podresult-unversioned.json, written by that code from schemaFixture) reads as the
// same result, with the Allocate answers byte for byte (agent TestPreviouslyRunningFromUnversioned
// checks that its devices are what a start restores).
func TestPodResultReadsUnversioned(t *testing.T) {
	dir := t.TempDir()
	old, err := os.ReadFile(filepath.Join("testdata", "podresult-unversioned.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := schemaFixture(t)
	if err := os.WriteFile(Path(dir, PodOf(want)), old, 0o600); err != nil {
		t.Fatal(err)
	}
	results, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := results[want.UID]
	if got == nil {
		t.Fatalf("the unversioned result was not read: %v", results)
	}
	assertSameResult(t, got, want)
	for i, c := range got.Containers {
		for j, al := range c.Allocations {
			if w := want.Containers[i].Allocations[j].AllocResp; !bytes.Equal(al.AllocResp, w) {
				t.Errorf("container %s, %s: answer %x, want the file's %x", c.Name, al.Resource, al.AllocResp, w)
			}
		}
	}

}

// TestPodResultRejectsUnknownVersion: a result of another schema version or kind is not
// guessed at.
func TestPodResultRejectsUnknownVersion(t *testing.T) {
	for _, doc := range []string{
		`{"apiVersion": "kdm.io/v2", "kind": "PodResult", "uid": "u"}`,
		`{"apiVersion": "kdm.io/v1", "kind": "Pod", "uid": "u"}`,
	} {
		var r PodResult
		if err := json.Unmarshal([]byte(doc), &r); err == nil {
			t.Errorf("%s read as %+v, want an error", doc, r)
		}
	}
}

// TestPodResultDevicesOnce: the v1 form lists a device filed under two NUMA nodes once, with
// both, and one without topology with none; reading it back files them as the checkpoint does.
func TestPodResultDevicesOnce(t *testing.T) {
	al := Allocation{Resource: "r", DeviceIDs: checkpoint.DevicesPerNUMA{1: {"b", "a"}, 0: {"a"}, -1: {"c"}}}
	raw, err := json.Marshal(al)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"resource":"r","devices":[{"id":"a","numaNodes":[0,1]},{"id":"b","numaNodes":[1]},{"id":"c"}]}`
	if string(raw) != want {
		t.Fatalf("allocation JSON %s, want %s", raw, want)
	}
	var back Allocation
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if wantIDs := (checkpoint.DevicesPerNUMA{0: {"a"}, 1: {"a", "b"}, -1: {"c"}}); !reflect.DeepEqual(back.DeviceIDs, wantIDs) {
		t.Fatalf("read back %v, want %v", back.DeviceIDs, wantIDs)
	}
	if back.AllocResp != nil {
		t.Fatalf("an allocation without an answer read back with one: %x", back.AllocResp)
	}
}

// assertSameResult compares two results, the Allocate answers as messages and the devices as
// sets per NUMA node.
func assertSameResult(t *testing.T, got, want *PodResult) {
	t.Helper()
	g, w := *got, *want
	g.Containers, w.Containers = nil, nil
	if !reflect.DeepEqual(g, w) {
		t.Errorf("result %+v, want %+v", g, w)
	}
	if len(got.Containers) != len(want.Containers) {
		t.Fatalf("%d containers, want %d", len(got.Containers), len(want.Containers))
	}
	for i := range want.Containers {
		gc, wc := got.Containers[i], want.Containers[i]
		gals, wals := gc.Allocations, wc.Allocations
		gc.Allocations, wc.Allocations = nil, nil
		if !reflect.DeepEqual(gc, wc) {
			t.Errorf("container %d: %+v, want %+v", i, gc, wc)
		}
		if len(gals) != len(wals) {
			t.Fatalf("container %s: %d allocations, want %d", wc.Name, len(gals), len(wals))
		}
		for j := range wals {
			ga, wa := gals[j], wals[j]
			if ga.Resource != wa.Resource || !reflect.DeepEqual(sortedPerNUMA(ga.DeviceIDs), sortedPerNUMA(wa.DeviceIDs)) {
				t.Errorf("container %s allocation %d: %s %v, want %s %v", wc.Name, j, ga.Resource, ga.DeviceIDs, wa.Resource, wa.DeviceIDs)
			}
			gr, wr := &pluginapi.ContainerAllocateResponse{}, &pluginapi.ContainerAllocateResponse{}
			if err := proto.Unmarshal(ga.AllocResp, gr); err != nil {
				t.Fatal(err)
			}
			if err := proto.Unmarshal(wa.AllocResp, wr); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(gr, wr) {
				t.Errorf("container %s, %s: answer %v, want %v", wc.Name, wa.Resource, gr, wr)
			}
		}
	}
}

func sortedPerNUMA(per checkpoint.DevicesPerNUMA) checkpoint.DevicesPerNUMA {
	out := checkpoint.DevicesPerNUMA{}
	for n, ids := range per {
		out[n] = slices.Sorted(slices.Values(ids))
	}
	return out
}

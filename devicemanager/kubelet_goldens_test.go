package devicemanager

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/deviceplugin"
)

const goldenDir = "../testdata/kubelet-1.36-checkpoints"

// goldenScenario is the part of a golden's scenario.json this test replays and checks.
type goldenScenario struct {
	Inputs struct {
		NUMANodes int `json:"numa_nodes"`
		Plugins   []struct {
			Resource string `json:"resource"`
			Devices  []struct {
				ID        string  `json:"id"`
				Unhealthy bool    `json:"unhealthy"`
				NUMA      []int64 `json:"numa"`
			} `json:"devices"`
			PreferredAllocation bool `json:"preferred_allocation"`
		} `json:"plugins"`
		TopologyHints []struct {
			PodUID    string `json:"pod_uid"`
			Container string `json:"container"`
			NUMANodes []int  `json:"numa_nodes"`
		} `json:"topology_hints"`
		Steps []goldenStep `json:"steps"`
	} `json:"inputs"`
	Expected struct {
		Capacity map[string]struct {
			Capacity    int64 `json:"capacity"`
			Allocatable int64 `json:"allocatable"`
		} `json:"capacity"`
		RegisteredDevices map[string][]string `json:"registered_devices"`
		EntryCount        int                 `json:"entry_count"`
		Allocations       []string            `json:"allocations"`
		RunOptions        []goldenRunOptions  `json:"run_container_options"`
	} `json:"expected"`
	Restart struct {
		Capacity map[string]struct {
			Capacity    int64 `json:"capacity"`
			Allocatable int64 `json:"allocatable"`
		} `json:"capacity_before_plugins_reregister"`
		RestoredContainers int  `json:"restored_containers"`
		ShouldReset        bool `json:"should_reset_extended_resource_capacity"`
		FileUnchanged      bool `json:"file_unchanged_by_start"`
	} `json:"upstream_restart_view"`
}

type goldenStep struct {
	Admit *struct {
		UID            string            `json:"uid"`
		Name           string            `json:"name"`
		InitContainers []goldenContainer `json:"init_containers"`
		Containers     []goldenContainer `json:"containers"`
	} `json:"admit"`
	Deactivate string `json:"deactivate"`
}

type goldenContainer struct {
	Name        string           `json:"name"`
	Restartable bool             `json:"restartable_init"`
	Requests    map[string]int64 `json:"requests"`
}

type goldenRunOptions struct {
	PodUID     string   `json:"pod_uid"`
	Container  string   `json:"container"`
	Envs       []string `json:"envs"`
	Devices    []string `json:"devices"`
	CDIDevices []string `json:"cdi_devices"`
}

// goldenPlugin answers Allocate as the kubelet's test plugin did when the goldens were made:
// <RESOURCE>_DEVICES=ids, one /dev/<id> rw node and one CDI name per device.
func goldenAllocator(res string) deviceplugin.AllocateFunc {
	env := strings.ToUpper(strings.NewReplacer(".", "_", "/", "_").Replace(res)) + "_DEVICES"
	return func(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		resp := &pluginapi.AllocateResponse{}
		for _, cr := range req.ContainerRequests {
			r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{env: strings.Join(cr.DevicesIds, ",")}}
			for _, id := range cr.DevicesIds {
				r.Devices = append(r.Devices, &pluginapi.DeviceSpec{HostPath: "/dev/" + id, ContainerPath: "/dev/" + id, Permissions: "rw"})
				r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: res + "=" + id})
			}
			resp.ContainerResponses = append(resp.ContainerResponses, r)
		}
		return resp, nil
	}
}

// hintsByContainer is an AffinityStore built from the scenario's hints.
type hintsByContainer map[string][]int

func (h hintsByContainer) GetAffinity(podUID, container string) TopologyHint {
	if nodes, ok := h[podUID+"/"+container]; ok {
		return TopologyHint{NUMANodes: nodes, Preferred: true}
	}
	return TopologyHint{}
}

// TestKubeletGoldenScenarios replays every golden scenario the real kubelet v1.36.0 recorded
// through our manager, over real sockets, and compares capacity, allocatable, registered
// devices, the exact assignments (device IDs per NUMA node: the kubelet's choices here are
// forced or follow ID order, as ours do), the run options, the checkpoint's entries and what a
// restarted manager restores.
func TestKubeletGoldenScenarios(t *testing.T) {
	dirs, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	replayed := 0
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(goldenDir, d.Name(), "scenario.json"))
		if err != nil {
			continue
		}
		var sc goldenScenario
		if err := json.Unmarshal(raw, &sc); err != nil {
			t.Fatalf("%s: %v", d.Name(), err)
		}
		if len(sc.Inputs.Plugins) == 0 {
			continue // checkpoint-only goldens (empty, corrupt, legacy) are covered by the checkpoint package
		}
		if err := sc.expandElisions(); err != nil {
			t.Fatalf("%s: %v", d.Name(), err)
		}
		replayed++
		t.Run(d.Name(), func(t *testing.T) { replayGolden(t, d.Name(), &sc) })
	}
	if replayed < 6 {
		t.Fatalf("replayed %d golden scenarios, want at least 6", replayed)
	}
}

func replayGolden(t *testing.T, name string, sc *goldenScenario) {
	hints := hintsByContainer{}
	for _, h := range sc.Inputs.TopologyHints {
		hints[h.PodUID+"/"+h.Container] = h.NUMANodes
	}
	var numa []int
	for i := 0; i < sc.Inputs.NUMANodes; i++ {
		numa = append(numa, i)
	}
	f := newAllocFixture(t, Config{TopologyAffinity: hints, NUMANodes: numa})
	for _, pl := range sc.Inputs.Plugins {
		var devs []*pluginapi.Device
		for _, d := range pl.Devices {
			dev := numaDevice(d.ID, d.NUMA...)
			if d.Unhealthy {
				dev.Health = pluginapi.Unhealthy
			}
			devs = append(devs, dev)
		}
		f.plugin(pl.Resource, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: pl.PreferredAllocation}, devs,
			func(c *deviceplugin.Config) { c.Allocate = goldenAllocator(pl.Resource) })
	}
	pods := map[string]*v1.Pod{}
	for _, step := range sc.Inputs.Steps {
		switch {
		case step.Admit != nil:
			pod := testPod(step.Admit.UID)
			pod.Name = step.Admit.Name
			for _, c := range step.Admit.InitContainers {
				ic := container(c.Name, c.Requests)
				if c.Restartable {
					always := v1.ContainerRestartPolicyAlways
					ic.RestartPolicy = &always
				}
				pod.Spec.InitContainers = append(pod.Spec.InitContainers, ic)
			}
			for _, c := range step.Admit.Containers {
				pod.Spec.Containers = append(pod.Spec.Containers, container(c.Name, c.Requests))
			}
			if err := f.admit(pod); err != nil {
				t.Fatalf("admitting %s: %v", pod.Name, err)
			}
			pods[step.Admit.UID] = pod
		case step.Deactivate != "":
			f.pods.remove(step.Deactivate)
			f.m.UpdateAllocatedDevices()
		}
	}

	// Capacity, allocatable and registered devices.
	c, a, _ := f.m.GetCapacity()
	for res, want := range sc.Expected.Capacity {
		if quantity(c, res) != want.Capacity || quantity(a, res) != want.Allocatable {
			t.Errorf("%s: capacity %d allocatable %d, kubelet %d/%d", res, quantity(c, res), quantity(a, res), want.Capacity, want.Allocatable)
		}
	}
	if err := f.m.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(f.m.CheckpointPath())
	if err != nil {
		t.Fatal(err)
	}
	data, _, err := checkpoint.Decode(raw)
	if err != nil {
		t.Fatalf("our checkpoint does not decode: %v", err)
	}
	data = data.Sorted()
	if diff := cmp.Diff(sc.Expected.RegisteredDevices, data.RegisteredDevices); diff != "" {
		t.Errorf("registered devices (-kubelet +ours):\n%s", diff)
	}
	if len(data.PodDeviceEntries) != sc.Expected.EntryCount {
		t.Errorf("%d checkpoint entries, kubelet %d", len(data.PodDeviceEntries), sc.Expected.EntryCount)
	}
	// Assignments, in the kubelet's notation, from our checkpoint.
	var got []string
	for _, e := range data.PodDeviceEntries {
		got = append(got, allocationString(e))
	}
	sort.Strings(got)
	want := append([]string(nil), sc.Expected.Allocations...)
	sort.Strings(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("assignments (-kubelet +ours):\n%s", diff)
	}
	// The kubelet's own checkpoint of the same scenario holds the same entries.
	kubelet, err := os.ReadFile(filepath.Join(goldenDir, name, checkpoint.FileName))
	if err != nil {
		t.Fatal(err)
	}
	kdata, _, err := checkpoint.Decode(kubelet)
	if err != nil {
		t.Fatal(err)
	}
	if ours, theirs := entriesWithoutAllocResp(data), entriesWithoutAllocResp(kdata.Sorted()); !cmp.Equal(ours, theirs) {
		t.Errorf("checkpoint entries differ from the kubelet's (-kubelet +ours):\n%s", cmp.Diff(theirs, ours))
	}
	// Run options per container.
	for _, ro := range sc.Expected.RunOptions {
		pod := pods[ro.PodUID]
		opts, err := f.m.GetDeviceRunContainerOptions(context.Background(), pod, findContainer(pod, ro.Container))
		if err != nil || opts == nil {
			t.Errorf("%s/%s: run options %v, %v", ro.PodUID, ro.Container, opts, err)
			continue
		}
		var envs, devs, cdi []string
		for _, e := range opts.Envs {
			envs = append(envs, e.Name+"="+e.Value)
		}
		for _, d := range opts.Devices {
			devs = append(devs, d.PathOnHost+":"+d.PathInContainer+":"+d.Permissions)
		}
		for _, c := range opts.CDIDevices {
			cdi = append(cdi, c.Name)
		}
		for _, pair := range [][2][]string{{ro.Envs, envs}, {ro.Devices, devs}, {ro.CDIDevices, cdi}} {
			w, g := append([]string(nil), pair[0]...), append([]string(nil), pair[1]...)
			sort.Strings(w)
			sort.Strings(g)
			if !cmp.Equal(w, g) {
				t.Errorf("%s/%s run options: kubelet %v, ours %v", ro.PodUID, ro.Container, pair[0], pair[1])
			}
		}
	}

	// Restart: a new manager on the same directory, before any plugin re-registers.
	before := bytes.Clone(raw)
	if err := f.m.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range f.pluginsStopped() {
		p.Stop()
	}
	m2 := testManager(t, f.dir, Config{}, Sources{ActivePods: f.pods.active})
	c2, a2, _ := m2.GetCapacity()
	for res, want := range sc.Restart.Capacity {
		if quantity(c2, res) != want.Capacity || quantity(a2, res) != want.Allocatable {
			t.Errorf("after restart %s: %d/%d, kubelet %d/%d", res, quantity(c2, res), quantity(a2, res), want.Capacity, want.Allocatable)
		}
	}
	m2.mu.Lock()
	restored := 0
	for _, uid := range m2.st.PodUIDs() {
		restored += len(m2.st.Containers(uid))
	}
	m2.mu.Unlock()
	if restored != sc.Restart.RestoredContainers {
		t.Errorf("restored %d containers, kubelet %d", restored, sc.Restart.RestoredContainers)
	}
	if m2.ShouldResetExtendedResourceCapacity() != sc.Restart.ShouldReset {
		t.Errorf("ShouldResetExtendedResourceCapacity %v, kubelet %v", !sc.Restart.ShouldReset, sc.Restart.ShouldReset)
	}
	if after, _ := os.ReadFile(m2.CheckpointPath()); sc.Restart.FileUnchanged && !bytes.Equal(before, after) {
		t.Errorf("Start rewrote the checkpoint")
	}

	// The kubelet's own file restores the same state into a fresh manager, untouched.
	kdir := shortDir(t)
	if err := os.WriteFile(filepath.Join(kdir, checkpoint.FileName), kubelet, 0o600); err != nil {
		t.Fatal(err)
	}
	m3 := testManager(t, kdir, Config{}, Sources{})
	m3.mu.Lock()
	restoredEntries := m3.st.Prepared().Data().PodDeviceEntries
	m3.mu.Unlock()
	if diff := cmp.Diff(kdata.Sorted().PodDeviceEntries, restoredEntries); diff != "" {
		t.Errorf("state restored from the kubelet's checkpoint (-kubelet +ours):\n%s", diff)
	}
	for res := range sc.Restart.Capacity {
		if !capacityIs(m3, res, 0, 0) {
			t.Errorf("%s restored from the kubelet's checkpoint is not at 0/0 before its plugin registers", res)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(kdir, checkpoint.FileName)); !bytes.Equal(kubelet, after) {
		t.Errorf("Start rewrote the kubelet's checkpoint")
	}
}

// allocationString renders an entry as the goldens do: "uid/container/resource numaN=[ids]".
func allocationString(e checkpoint.PodDevicesEntry) string {
	nodes := make([]int64, 0, len(e.DeviceIDs))
	for n := range e.DeviceIDs {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
	parts := []string{fmt.Sprintf("%s/%s/%s", e.PodUID, e.ContainerName, e.ResourceName)}
	for _, n := range nodes {
		ids := append([]string(nil), e.DeviceIDs[n]...)
		sort.Strings(ids)
		parts = append(parts, fmt.Sprintf("numa%d=[%s]", n, strings.Join(ids, " ")))
	}
	return strings.Join(parts, " ")
}

func entriesWithoutAllocResp(d *checkpoint.Data) []checkpoint.PodDevicesEntry {
	out := make([]checkpoint.PodDevicesEntry, 0, len(d.PodDeviceEntries))
	for _, e := range d.PodDeviceEntries {
		e.AllocResp = nil
		out = append(out, e)
	}
	return out
}

func findContainer(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

// elided marks a run the scenario file leaves out, e.g. "(... 398 more ...)".
func elided(s string) bool { return strings.HasPrefix(s, "(...") }

// numbered splits "gpu-007" into "gpu-", 7 and the digit count.
func numbered(s string) (prefix string, n, width int, ok bool) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	if i == len(s) {
		return "", 0, 0, false
	}
	v, err := strconv.Atoi(s[i:])
	return s[:i], v, len(s) - i, err == nil
}

// expandElisions regenerates the runs of devices and admission steps the large scenario
// abbreviates, following the numbering of their neighbours.
func (sc *goldenScenario) expandElisions() error {
	for pi := range sc.Inputs.Plugins {
		devs := sc.Inputs.Plugins[pi].Devices
		for i := 0; i < len(devs); i++ {
			if !elided(devs[i].ID) {
				continue
			}
			if i == 0 || i == len(devs)-1 {
				return fmt.Errorf("elision at the edge of the device list")
			}
			prefix, from, width, ok1 := numbered(devs[i-1].ID)
			_, to, _, ok2 := numbered(devs[i+1].ID)
			if !ok1 || !ok2 {
				return fmt.Errorf("cannot expand %q", devs[i].ID)
			}
			fill := devs[i-1]
			var gen []struct {
				ID        string  `json:"id"`
				Unhealthy bool    `json:"unhealthy"`
				NUMA      []int64 `json:"numa"`
			}
			for n := from + 1; n < to; n++ {
				fill.ID = fmt.Sprintf("%s%0*d", prefix, width, n)
				gen = append(gen, fill)
			}
			devs = append(devs[:i], append(gen, devs[i+1:]...)...)
			i += len(gen) - 1
		}
		sc.Inputs.Plugins[pi].Devices = devs
	}
	steps := sc.Inputs.Steps
	for i := 0; i < len(steps); i++ {
		if !elided(steps[i].Deactivate) {
			continue
		}
		prev, next := steps[i-1].Admit, steps[i+1].Admit
		if prev == nil || next == nil {
			return fmt.Errorf("cannot expand step %q", steps[i].Deactivate)
		}
		uidPrefix, from, uidWidth, _ := numbered(prev.UID)
		_, to, _, _ := numbered(next.UID)
		namePrefix, _, nameWidth, _ := numbered(prev.Name)
		var gen []goldenStep
		for n := from + 1; n < to; n++ {
			a := *prev
			a.UID = fmt.Sprintf("%s%0*d", uidPrefix, uidWidth, n)
			a.Name = fmt.Sprintf("%s%0*d", namePrefix, nameWidth, n)
			gen = append(gen, goldenStep{Admit: &a})
		}
		steps = append(steps[:i], append(gen, steps[i+1:]...)...)
		i += len(gen) - 1
	}
	sc.Inputs.Steps = steps
	return nil
}

// TestLegacyCheckpointPolicy: the kubelet 1.36 starts empty on a pre-1.20 checkpoint; with
// Policy.ReadLegacyCheckpoint the assignments come back, every device on NUMA node 0.
func TestLegacyCheckpointPolicy(t *testing.T) {
	legacy, err := os.ReadFile(filepath.Join(goldenDir, "legacy-v1-valid", checkpoint.FileName))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		policy Policy
		want   int
	}{{KubeletPolicy(), 0}, {Policy{ReadLegacyCheckpoint: true}, 1}} {
		dir := shortDir(t)
		if err := os.WriteFile(filepath.Join(dir, checkpoint.FileName), legacy, 0o600); err != nil {
			t.Fatal(err)
		}
		m := testManager(t, dir, Config{Policy: tc.policy}, Sources{})
		m.mu.Lock()
		entries := m.st.Prepared().Data().PodDeviceEntries
		m.mu.Unlock()
		if len(entries) != tc.want {
			t.Fatalf("ReadLegacyCheckpoint=%v: %d entries restored, want %d", tc.policy.ReadLegacyCheckpoint, len(entries), tc.want)
		}
		for _, e := range entries {
			if _, ok := e.DeviceIDs[0]; !ok || len(e.DeviceIDs) != 1 {
				t.Fatalf("legacy entry not on NUMA 0: %v", e.DeviceIDs)
			}
		}
	}
}

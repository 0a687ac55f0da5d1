package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
	"github.com/kdm-project/kdm/internal/powercut"
)

// cutRun is one run of a power-cut scenario: a manager and a plugin on a fresh power-cut
// file system, and every allocation whose Allocate returned.
type cutRun struct {
	t      *testing.T
	policy string
	fs     *powercut.FS
	m      *Manager
	plugin *plugintest.Plugin
	pods   *podList
	plain  bool // Config.PlainCheckpointWrites
	// returned maps "pod/container" to the devices of every Allocate that returned nil, as
	// the manager reported them then.
	returned map[string]string
	// removed holds "pod/container" of every allocation whose garbage collection returned:
	// a restart must not bring it back.
	removed map[string]bool
}

// cutDevices is how many devices the scenarios' plugin serves.
const cutDevices = 8

// cutted reports whether the power is cut: the scenario's remaining steps are then moot.
func (r *cutRun) cutted() bool {
	select {
	case <-r.fs.Cutting():
		return true
	default:
		return false
	}
}

// startCutManager starts a manager with the run's policy on dir; plain makes its checkpoint
// writes the plain ones (Config.PlainCheckpointWrites).
func startCutManager(t *testing.T, policy, dir string, pods *podList, plain bool) (*Manager, error) {
	pol, err := ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{
		PluginDir:  dir,
		Policy:     pol,
		Logger:     ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1))),
		Registerer: prometheus.NewRegistry(),

		PlainCheckpointWrites: plain,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background(), Sources{ActivePods: pods.active}); err != nil {
		return nil, err
	}
	return m, nil
}

// allocate admits a new pod asking for n devices and records the allocation when Allocate
// returns nil. After the cut an error is expected and ignored.
func (r *cutRun) allocate(uid string, n int64) {
	if r.cutted() {
		return
	}
	pod := testPod(uid, container("c", map[string]int64{gpu: n}))
	r.pods.add(pod)
	if err := r.m.Allocate(context.Background(), pod, &pod.Spec.Containers[0]); err != nil {
		if !r.cutted() {
			r.t.Fatalf("Allocate %s before any cut: %v", uid, err)
		}
		return
	}
	r.returned[uid+"/c"] = cutAllocatedIDs(r.m, uid, "c")
}

// setHealth flips a device's health and waits until the manager has written it, or until
// the power is cut: a cut inside the flip's own checkpoint write fails that write, and the
// device-change broadcast, which follows the write, may then be the only one the wait had.
func (r *cutRun) setHealth(id, health string, allocatable int64) {
	if r.cutted() {
		return
	}
	if err := r.plugin.SetHealth(id, health); err != nil {
		r.t.Fatal(err)
	}
	if r.waitOrCut("health "+id+" "+health, func() bool { return capacityIs(r.m, gpu, cutDevices, allocatable) }) {
		r.m.WaitForCheckpointWrites()
	}
}

// cutAllocatedIDs returns the sorted device IDs the manager holds for a container, joined.
func cutAllocatedIDs(m *Manager, uid, container string) string {
	var ids []string
	for _, e := range m.GetContainerAllocations(uid, container) {
		for _, devs := range e.DeviceIDs {
			ids = append(ids, devs...)
		}
	}
	slices.Sort(ids)
	return strings.Join(slices.Compact(ids), ",")
}

// cutResult is what one run found: the operation's counted ops (when the cut did not come
// first) and their descriptions, the op the cut followed, and what the check found wrong.
type cutResult struct {
	ops      int
	log      []string
	last     string
	problems []string
}

// cutOpts say where one run cuts the power and what the disk keeps.
type cutOpts struct {
	// after is the counted op of the operation right after which the power is cut; 0 cuts
	// right after the operation returned.
	after int
	// writeBack keeps every write made before the cut, synced or not
	// (powercut.FS.WriteBackAtCut); the default keeps none that was not synced.
	writeBack bool
	// dropFileSyncs and dropDirSyncs make the operation's syncs ineffective
	// (powercut.FS.DropSyncs), to show that the checks catch a missing sync.
	dropFileSyncs, dropDirSyncs bool
}

// runCut runs scenario sc under policy on a fresh power-cut file system, cutting the power as
// o says, and checks the disk the cut left.
func runCut(t *testing.T, policy string, sc cutScenario, o cutOpts) cutResult {
	t.Helper()
	mnt := shortDir(t)
	fs, err := powercut.Mount(mnt, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &cutRun{t: t, policy: policy, fs: fs, pods: newPodList(), plain: sc.plain, returned: map[string]string{}, removed: map[string]bool{}}
	defer func() {
		if r.plugin != nil {
			r.plugin.Stop()
		}
		if r.m != nil {
			_ = r.m.Stop() // its last write fails once the power is cut
		}
		if err := fs.Unmount(); err != nil {
			t.Error(err)
		}
	}()
	if r.m, err = startCutManager(t, policy, mnt, r.pods, sc.plain); err != nil {
		t.Fatal(err)
	}
	r.plugin = testPlugin(t, mnt, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, ids("g", cutDevices)...), envAllocator("GPU"))
	waitFor(t, r.m, "devices", func() bool { return capacityIs(r.m, gpu, cutDevices, cutDevices) })
	r.waitForListedDevices()
	sc.setup(r)
	if r.m != nil {
		r.m.WaitForCheckpointWrites()
	}
	start := fs.Ops()
	fs.DropSyncs(o.dropFileSyncs, o.dropDirSyncs)
	if o.writeBack {
		fs.WriteBackAtCut()
	}
	if o.after > 0 {
		fs.CutAfter(o.after)
	}
	sc.op(r)
	var res cutResult
	if !r.cutted() {
		res.ops = fs.Ops() - start
	}
	img := fs.Cut()
	res.log = fs.Log(start)
	if o.after > 0 && o.after <= len(res.log) {
		res.last = res.log[o.after-1]
	}
	res.problems = r.checkRestart(img)
	return res
}

// waitForListedDevices waits until the checkpoint lists the plugin's devices: the device-list
// write that registration queues (at once, or coalesced under some policies) is then behind
// the start state, not inside the operation.
func (r *cutRun) waitForListedDevices() {
	deadline := time.Now().Add(waitTimeout)
	for {
		b, err := os.ReadFile(filepath.Join(r.fs.Dir(), checkpoint.FileName))
		if err == nil {
			if data, _, err := checkpoint.Decode(b); err == nil && len(data.RegisteredDevices[gpu]) == cutDevices {
				return
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the checkpoint does not list the %d devices after %v", cutDevices, waitTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkRestart restarts a manager on the disk a cut left (written into an ordinary
// directory) and reports every returned allocation it lost, every collected one it brought
// back, a checkpoint that does not decode, a quarantined file, and a device assigned to two
// pods.
func (r *cutRun) checkRestart(img *powercut.Image) []string {
	var problems []string
	dir := shortDir(r.t)
	if err := img.WriteTo(dir); err != nil {
		r.t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, checkpoint.FileName))
	switch {
	case errors.Is(err, os.ErrNotExist):
		if len(r.returned) > 0 {
			problems = append(problems, "the checkpoint is gone")
		}
	case err != nil:
		r.t.Fatal(err)
	default:
		if data, _, err := checkpoint.Decode(b); err != nil {
			problems = append(problems, fmt.Sprintf("the checkpoint does not decode: %v", err))
		} else {
			problems = append(problems, cutDoubleAssigned(data)...)
		}
	}
	m, err := startCutManager(r.t, r.policy, dir, r.pods, false)
	if err != nil {
		return append(problems, fmt.Sprintf("the restarted manager does not start: %v", err))
	}
	defer func() { _ = m.Stop() }()
	for _, key := range slices.Sorted(maps.Keys(r.returned)) {
		uid, c, _ := strings.Cut(key, "/")
		if got := cutAllocatedIDs(m, uid, c); got != r.returned[key] {
			problems = append(problems, fmt.Sprintf("lost the allocation of %s: restored [%s], Allocate returned [%s]", key, got, r.returned[key]))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(r.removed)) {
		uid, c, _ := strings.Cut(key, "/")
		if got := cutAllocatedIDs(m, uid, c); got != "" {
			problems = append(problems, fmt.Sprintf("brought back the collected allocation of %s: [%s]", key, got))
		}
	}
	if names, _ := filepath.Glob(filepath.Join(dir, checkpoint.FileName+".corrupt-*")); len(names) > 0 {
		problems = append(problems, fmt.Sprintf("the restart quarantined %v", names))
	}
	return problems
}

// cutDoubleAssigned reports each device a checkpoint gives to two pods.
func cutDoubleAssigned(data *checkpoint.Data) []string {
	var problems []string
	owner := map[string]string{}
	for _, e := range data.PodDeviceEntries {
		for _, devs := range e.DeviceIDs {
			for _, id := range devs {
				key := e.ResourceName + "/" + id
				if o, ok := owner[key]; ok && o != e.PodUID {
					problems = append(problems, fmt.Sprintf("device %s is assigned to pods %s and %s", key, o, e.PodUID))
				}
				owner[key] = e.PodUID
			}
		}
	}
	return problems
}

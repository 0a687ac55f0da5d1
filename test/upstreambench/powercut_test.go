package upstreambench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	kdm "github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/internal/powercut"
	"github.com/kdm-project/kdm/test/upstreambench/suite"
)

// The power-cut comparison runs the kubelet's own device manager and kdm's, under each of its
// policies, on the internal/powercut file system, which keeps on a power cut only what was
// synced (file contents by fsync, names by an fsync of their directory). From a durable start
// (one pod admitted, everything synced) a manager admits cutPods more pods one after another;
// the power is cut after each counted file-system op k of that sequence in turn, and a manager of the same side restarted on what the disk kept must hold
// every pod whose Allocate had returned before the cut.

// cutPods is how many pods the sequence admits.
const cutPods = 3

// cutSide is one manager under the power cut.
type cutSide struct {
	name  string
	start func(tb testing.TB, dir string, pods *suite.PodList) suite.Manager
}

func cutSides() []cutSide {
	sides := []cutSide{{name: kubeletSide.Name, start: startKubelet}}
	for _, name := range kdm.PolicyNames() {
		p, err := kdm.ParsePolicy(name)
		if err != nil {
			panic(err)
		}
		sides = append(sides, cutSide{name: "kdm,policy=" + name, start: func(tb testing.TB, dir string, pods *suite.PodList) suite.Manager {
			return startKDM(tb, dir, pods, p)
		}})
	}
	return sides
}

// cutTally is what the cut points of one side found.
type cutTally struct {
	points   int      // cut points
	returned int      // of them, those after at least one Allocate of the sequence returned
	losing   int      // of those, the ones after which a returned allocation was lost
	lastLost int      // of those, the ones after which the last one returned was lost
	lost     []string // what was lost where, for the log
}

// TestPowerCutKubelet reports, for the kubelet's device manager and for kdm under every
// policy, how many cut points lose an allocation whose Allocate had returned. kdm must lose
// none; the kubelet, which never syncs the directory after renaming its new checkpoint into
// place, loses the last allocation at every cut point after its Allocate returned, and every
// earlier one of the sequence with it.
func TestPowerCutKubelet(t *testing.T) {
	powercut.SkipUnlessAvailable(t)
	for _, side := range cutSides() {
		for _, wb := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/writeback=%v", side.name, wb), func(t *testing.T) {
				n, _ := cutSequence(t, side, 0, wb)
				if n == 0 {
					t.Fatal("the sequence made no file-system op")
				}
				var tally cutTally
				for k := 1; k <= n; k++ {
					_, r := cutSequence(t, side, k, wb)
					tally.points++
					if r.returned > 0 {
						tally.returned++
					}
					if r.lastLost {
						tally.lastLost++
					}
					if len(r.lost) > 0 {
						tally.losing++
						tally.lost = append(tally.lost, fmt.Sprintf("cut after op %d (%s): lost %s", k, r.last, strings.Join(r.lost, ", ")))
					}
				}
				t.Logf("%s, write-back %v: %d of %d cut points lose the last allocation whose Allocate returned, %d lose one (%d of the cut points follow a returned Allocate)",
					side.name, wb, tally.lastLost, tally.points, tally.losing, tally.returned)
				for _, l := range tally.lost {
					t.Log(l)
				}
				if strings.HasPrefix(side.name, "kdm") && tally.losing > 0 {
					t.Errorf("kdm lost allocations: %s", strings.Join(tally.lost, "; "))
				}
				if side.name == kubeletSide.Name && tally.losing == 0 {
					t.Errorf("the kubelet lost nothing: either it now syncs its directory or the power-cut file system lost its teeth")
				}
			})
		}
	}
}

// cutRunResult is one run of the sequence: how many Allocates had returned by the cut, the op
// the cut followed, and the pods (of all returned) the restarted manager does not hold as
// Allocate gave them.
type cutRunResult struct {
	returned int
	last     string
	lost     []string
	lastLost bool // the last pod whose Allocate returned is not restored
}

// cutSequence runs the sequence on a fresh power-cut file system with the cut after its
// after-th counted op (0: after the sequence), and checks a restart on what the disk kept. It
// returns the sequence's op count when no cut came first.
func cutSequence(t *testing.T, side cutSide, after int, writeBack bool) (int, cutRunResult) {
	t.Helper()
	mnt := suite.ShortDir(t)
	fs, err := powercut.Mount(mnt, nil)
	if err != nil {
		t.Fatal(err)
	}
	pods := suite.NewPodList()
	m := side.start(t, mnt, pods)
	before := suite.CheckpointID(t, mnt)
	plugin := suite.StartPlugin(t, mnt, suite.DeviceList(cutPods+1))
	defer func() {
		_ = plugin.S.Stop(logr.Discard())
		m.Stop()
		if err := fs.Unmount(); err != nil {
			t.Error(err)
		}
	}()
	suite.WaitAllocatable(t, m, cutPods+1)
	m.Settle(t, before) // the write that follows the device list
	got := map[*v1.Pod][]string{}
	var lastPod *v1.Pod
	admit := func(i int) error {
		pod := suite.NewPod(i, 1)
		pods.Add(pod)
		if err := m.Allocate(pod); err != nil {
			return err
		}
		got[pod] = m.Devices(pod)
		lastPod = pod
		return nil
	}
	if err := admit(0); err != nil {
		t.Fatal(err)
	}
	fs.SyncAll() // the start is durable: the machine was idle long enough
	if writeBack {
		fs.WriteBackAtCut()
	}
	start := fs.Ops()
	if after > 0 {
		fs.CutAfter(after)
	}
	var res cutRunResult
	for i := 1; i <= cutPods; i++ {
		if err := admit(i); err != nil {
			if !isCut(fs) {
				t.Fatalf("Allocate before any cut: %v", err)
			}
			break
		}
		res.returned++
	}
	n := 0
	if !isCut(fs) {
		n = fs.Ops() - start
	}
	img := fs.Cut()
	if log := fs.Log(start); after > 0 && after <= len(log) {
		res.last = log[after-1]
	}
	res.lost = restartAndCompare(t, side, img, got)
	res.lastLost = res.returned > 0 && slices.Contains(res.lost, lastPod.Name)
	return n, res
}

func isCut(fs *powercut.FS) bool {
	select {
	case <-fs.Cutting():
		return true
	default:
		return false
	}
}

// restartAndCompare starts side's manager on img (written into an ordinary directory) and
// names each pod of got whose devices it does not restore.
func restartAndCompare(t *testing.T, side cutSide, img *powercut.Image, got map[*v1.Pod][]string) []string {
	t.Helper()
	dir := suite.ShortDir(t)
	if err := img.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	pods := suite.NewPodList()
	for pod := range got {
		pods.Add(pod)
	}
	m := side.start(t, dir, pods)
	defer m.Stop()
	var lost []string
	for pod, devs := range got {
		if restored := m.Devices(pod); !slices.Equal(restored, devs) {
			lost = append(lost, pod.Name)
		}
	}
	slices.Sort(lost)
	if names, _ := filepath.Glob(filepath.Join(dir, suite.CheckpointFile+".corrupt-*")); len(names) > 0 {
		lost = append(lost, "a quarantined checkpoint")
	}
	if _, err := os.Stat(filepath.Join(dir, suite.CheckpointFile)); err != nil && len(got) > 0 {
		lost = append(lost, "the checkpoint file")
	}
	return lost
}

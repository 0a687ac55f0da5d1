package explore

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
)

// conflictingRecords are the embedder's records of two pods that both claim gpu-1 (one record
// edited while the checkpoint was lost), and a third claim nobody disputes.
func conflictingRecords() map[string][]checkpoint.PodDevicesEntry {
	entry := func(pod string, ids ...string) checkpoint.PodDevicesEntry {
		return checkpoint.PodDevicesEntry{PodUID: "uid-" + pod, ContainerName: "app-0", ResourceName: domain + "gpu",
			DeviceIDs: checkpoint.DevicesPerNUMA{-1: ids}}
	}
	return map[string][]checkpoint.PodDevicesEntry{
		"p1": {entry("p1", "gpu-0", "gpu-1")},
		"p2": {entry("p2", "gpu-1")},
		"p3": {entry("p3", "gpu-3")},
	}
}

// restoreLines lists "POD/CONTAINER RESOURCE IDS" for the pods' restored assignments, sorted.
func restoreLines(pods []string, entries func(pod string) []checkpoint.PodDevicesEntry) []string {
	var out []string
	for _, pod := range pods {
		for _, e := range entries(pod) {
			var ids []string
			for _, l := range e.DeviceIDs {
				ids = append(ids, l...)
			}
			sort.Strings(ids)
			out = append(out, fmt.Sprintf("%s/%s %s %s", pod, e.ContainerName, e.ResourceName, strings.Join(ids, ",")))
		}
	}
	sort.Strings(out)
	return out
}

// simRestore starts the simulated manager with no checkpoint and the records.
func simRestore(records map[string][]checkpoint.PodDevicesEntry) []string {
	pol, _ := devicemanager.ParsePolicy("kdm")
	w := newWorld(pol, true)
	var names []string
	for name, recs := range records {
		names = append(names, name)
		p, _ := parsePod(name, []string{"gpu=1"})
		p.phase, p.records = podAdmitted, recs
		w.pods[name] = p
	}
	sort.Strings(names)
	w.order = names
	w.setFile(nil)
	w.restart(true)
	return restoreLines(names, func(pod string) []checkpoint.PodDevicesEntry { return w.st.ContainerEntries("uid-"+pod, "app-0") })
}

// managerRestore starts a real manager with no checkpoint and the records.
func managerRestore(t *testing.T, records map[string][]checkpoint.PodDevicesEntry) []string {
	dir, err := os.MkdirTemp("", "kdm-ls")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	m, err := devicemanager.New(devicemanager.Config{PluginDir: dir, Clock: clocktesting.NewFakeClock(origin), Policy: devicemanager.KDMPolicy(),
		Logger: funcr.New(func(string, string) {}, funcr.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var all []checkpoint.PodDevicesEntry
	var pods []*v1.Pod
	for name, recs := range records {
		names = append(names, name)
		all = append(all, recs...)
		pods = append(pods, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}})
	}
	sort.Strings(names)
	if err := m.Start(context.Background(), devicemanager.Sources{ActivePods: func() []*v1.Pod { return pods }, RecoveredAllocations: all}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Stop() }()
	return restoreLines(names, func(pod string) []checkpoint.PodDevicesEntry { return m.GetContainerAllocations("uid-"+pod, "app-0") })
}

// TestLockstepRestoresConflictingRecords: the embedder's records that two pods' claims of one
// device disagree in restore the same assignments in both drivers (every claim kept, the
// device contested), and the simulator's former rule (dropping the disputed records) is
// caught. Random runs never make such records: the embedder writes them from the manager's
// own assignments, so only an edited or mixed-up record disagrees.
func TestLockstepRestoresConflictingRecords(t *testing.T) {
	real := managerRestore(t, conflictingRecords())
	if sim := simRestore(conflictingRecords()); strings.Join(sim, "\n") != strings.Join(real, "\n") {
		t.Fatalf("restored assignments differ\nsimulator:\n%s\nmanager:\n%s", strings.Join(sim, "\n"), strings.Join(real, "\n"))
	}
	legacy.dropConflicts = true
	defer func() { legacy.dropConflicts = false }()
	if sim := simRestore(conflictingRecords()); strings.Join(sim, "\n") == strings.Join(real, "\n") {
		t.Fatalf("dropping disputed records went unnoticed: both restore\n%s", strings.Join(real, "\n"))
	}
	t.Logf("manager restores:\n%s", strings.Join(real, "\n"))
}

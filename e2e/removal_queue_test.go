package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/deviceplugin"
)

// TestRemovalsDoNotQueue (issue 42, item 4): many pods removed at once, while other pods'
// admissions are in flight, give their devices back together. A removal does not wait for a
// checkpoint write of its own behind every other removal's: kdm writes the checkpoint a few
// times for the whole batch, not once per pod. The time from the removal until the checkpoint
// holds none of the removed pods is logged (docs/pod-results.md quotes it).
func TestRemovalsDoNotQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("admits and removes hundreds of pods; run by make test")
	}
	const resource, pods, incoming = "example.com/dev", 300, 20
	n := newNode(t)
	n.startKdm("--policy", "kdm")
	devs := make([]*pluginapi.Device, pods+incoming)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: fmt.Sprintf("dev-%d", i), Health: pluginapi.Healthy}
	}
	plugin, err := deviceplugin.New(deviceplugin.Config{ResourceName: resource, PluginDir: n.pluginDir, Devices: devs, KeepRegistering: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := plugin.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plugin.Stop)
	n.eventually("the devices", func(st statusapi.NodeStatus) bool { return st.Allocatable[resource] == pods+incoming })
	for i := range pods {
		n.writeResourcePod(fmt.Sprintf("old-%d", i), resource, 1)
	}
	n.waitFor("the pods admitted", 5*time.Minute, func() bool {
		st, ok := n.status()
		if !ok {
			return false
		}
		admitted := 0
		for _, p := range st.Pods {
			if p.Phase == podresult.PhaseAdmitted {
				admitted++
			}
		}
		return admitted == pods
	})

	cp := filepath.Join(n.pluginDir, checkpoint.FileName)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(n.pluginDir); err != nil {
		t.Fatal(err)
	}
	// Every removal at once, with new pods' admissions in flight.
	removed := time.Now()
	for i := range pods {
		if err := os.Remove(filepath.Join(n.manifests, fmt.Sprintf("old-%d.yaml", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range incoming {
		n.writeResourcePod(fmt.Sprintf("new-%d", i), resource, 1)
	}
	writes := 0
	deadline := time.After(5 * time.Minute)
	for holdsRemoved(t, cp, pods) {
		select {
		case ev := <-w.Events:
			if filepath.Base(ev.Name) == checkpoint.FileName && ev.Has(fsnotify.Create) {
				writes++ // a checkpoint write renames its temporary file onto the name
			}
		case err := <-w.Errors:
			t.Fatal(err)
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("the removed pods' devices were still in the checkpoint 5 minutes after the removal")
		}
	}
	took := time.Since(removed)
	// The watch may report the last writes after the checkpoint was read without the pods.
	for drained := false; !drained; {
		select {
		case ev := <-w.Events:
			if filepath.Base(ev.Name) == checkpoint.FileName && ev.Has(fsnotify.Create) {
				writes++
			}
		case <-time.After(200 * time.Millisecond):
			drained = true
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("%d pods removed at once (%d admissions in flight): the checkpoint held none of them %v after the removal, after %d checkpoint writes (the new pods' included); load average %s",
		pods, incoming, took.Round(time.Millisecond), writes, load)
	if writes > pods/4 {
		t.Errorf("the checkpoint was written %d times before the last of %d removed pods left it; want the removals batched, not one write each", writes, pods)
	}
}

// holdsRemoved reports whether the checkpoint still assigns a device to any of the pods old-0..old-(n-1).
func holdsRemoved(t *testing.T, path string, n int) bool {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		return true // between a write's rename and the next read, or not yet written
	}
	data, _, err := checkpoint.Decode(raw)
	if err != nil {
		t.Fatalf("decoding the checkpoint: %v", err)
	}
	old := map[string]bool{}
	for i := range n {
		old[uidOf(fmt.Sprintf("old-%d", i))] = true
	}
	for _, e := range data.PodDeviceEntries {
		if old[e.PodUID] {
			return true
		}
	}
	return false
}

package state

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

func claim(pod, container string, ids ...string) checkpoint.PodDevicesEntry {
	return checkpoint.PodDevicesEntry{PodUID: pod, ContainerName: container, ResourceName: "gpu",
		DeviceIDs: checkpoint.DevicesPerNUMA{NoTopology: ids}, AllocResp: []byte{}}
}

// TestContests: restored entries of two pods naming one device make it contested; it stays
// held (never available), each pod keeps its other devices, an init container handing a device
// to its pod's app container is no contest, and the contest ends, naming the last claimant
// once, when the other claimant's containers are all gone.
func TestContests(t *testing.T) {
	s := New(Options{})
	s.AddRestored("gpu", time.Time{})
	s.Connect("gpu")
	s.ApplyDeviceList("gpu", []*pluginapi.Device{
		{ID: "g1", Health: pluginapi.Healthy}, {ID: "g2", Health: pluginapi.Healthy},
		{ID: "g3", Health: pluginapi.Healthy}, {ID: "g4", Health: pluginapi.Healthy},
		{ID: "g5", Health: pluginapi.Healthy},
	})
	entries := []checkpoint.PodDevicesEntry{
		claim("a", "init", "g1"), claim("a", "app", "g1", "g2"),
		claim("b", "app", "g1", "g3"), claim("b", "side", "g1"),
		claim("c", "app", "g4"),
	}
	if bad := s.Restore(&checkpoint.Data{PodDeviceEntries: entries}, nil, origin); len(bad) != 0 {
		t.Fatalf("restore skipped %v", bad)
	}
	want := []Contest{{Resource: "gpu", DeviceID: "g1", PodUIDs: []string{"a", "b"}}}
	if diff := cmp.Diff(want, s.Contests()); diff != "" {
		t.Fatalf("contests (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, FindContests(entries)); diff != "" {
		t.Fatalf("FindContests (-want +got):\n%s", diff)
	}
	if got := s.ContestsOf("c"); len(got) != 0 {
		t.Fatalf("ContestsOf(c) = %v, want none", got)
	}
	if got := sets.List(s.available("gpu")); !cmp.Equal(got, []string{"g5"}) {
		t.Fatalf("available %v, want only g5", got)
	}

	// One of b's containers goes (a failed commit undone): b still claims g1 through the other.
	s.uncommit("b", "side", []string{"gpu"})
	if diff := cmp.Diff(want, s.Contests()); diff != "" {
		t.Fatalf("contests after one of b's containers left (-want +got):\n%s", diff)
	}
	if got := s.TakeSettled(); got != nil {
		t.Fatalf("settled %v while b still claims g1", got)
	}

	// b goes: g1 is a's alone, b's g3 is free; a is named once.
	if removed := s.RemoveInactive(sets.New("a", "c")); !cmp.Equal(removed, []string{"b"}) {
		t.Fatalf("removed %v, want [b]", removed)
	}
	if got := s.Contests(); len(got) != 0 {
		t.Fatalf("contests after b left: %v", got)
	}
	if got := s.TakeSettled(); !cmp.Equal(got, []string{"a"}) {
		t.Fatalf("settled %v, want [a]", got)
	}
	if got := s.TakeSettled(); got != nil {
		t.Fatalf("settled named again: %v", got)
	}
	if got := sets.List(s.available("gpu")); !cmp.Equal(got, []string{"g3", "g5"}) {
		t.Fatalf("available %v, want g3 and g5", got)
	}
	if !s.isAllocated("gpu", "g1") {
		t.Fatalf("g1 freed while a holds it")
	}
}

// TestContestsOfThreeClaimants: a device three pods claim stays contested until two are gone.
func TestContestsOfThreeClaimants(t *testing.T) {
	s := New(Options{})
	s.Restore(&checkpoint.Data{PodDeviceEntries: []checkpoint.PodDevicesEntry{claim("a", "c", "g1"), claim("b", "c", "g1"), claim("c", "c", "g1")}}, nil, origin)
	s.RemoveInactive(sets.New("a", "b"))
	want := []Contest{{Resource: "gpu", DeviceID: "g1", PodUIDs: []string{"a", "b"}}}
	if diff := cmp.Diff(want, s.Contests()); diff != "" {
		t.Fatalf("contests after c left (-want +got):\n%s", diff)
	}
	s.RemoveInactive(sets.New("b"))
	if got, settled := s.Contests(), s.TakeSettled(); len(got) != 0 || !cmp.Equal(settled, []string{"b"}) {
		t.Fatalf("after a left: contests %v, settled %v; want none and [b]", got, settled)
	}
}

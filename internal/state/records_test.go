package state

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// TestCompareRecords: each way a checkpoint that decodes can disagree with the records of the
// same assignments, and what a restore that keeps the recorded devices takes from both.
func TestCompareRecords(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cp, records []checkpoint.PodDevicesEntry
		keep        []checkpoint.PodDevicesEntry
		found       []Disagreement
	}{{
		name:    "agree",
		cp:      []checkpoint.PodDevicesEntry{claim("a", "app", "g1"), claim("b", "app", "g2")},
		records: []checkpoint.PodDevicesEntry{claim("a", "app", "g1")},
		keep:    []checkpoint.PodDevicesEntry{claim("a", "app", "g1"), claim("b", "app", "g2")},
	}, {
		name:    "the checkpoint has no entry: the record's is added",
		cp:      []checkpoint.PodDevicesEntry{claim("b", "app", "g2")},
		records: []checkpoint.PodDevicesEntry{claim("a", "app", "g1")},
		keep:    []checkpoint.PodDevicesEntry{claim("b", "app", "g2"), claim("a", "app", "g1")},
		found:   []Disagreement{{PodUID: "a", ContainerName: "app", ResourceName: "gpu", Recorded: []string{"g1"}}},
	}, {
		name:    "a stale checkpoint gives the recorded device to a pod that is gone: both claim it",
		cp:      []checkpoint.PodDevicesEntry{claim("old", "app", "g1", "g2")},
		records: []checkpoint.PodDevicesEntry{claim("a", "app", "g1")},
		keep:    []checkpoint.PodDevicesEntry{claim("old", "app", "g1", "g2"), claim("a", "app", "g1")},
		found: []Disagreement{{PodUID: "a", ContainerName: "app", ResourceName: "gpu", Recorded: []string{"g1"},
			HeldByOthers: []string{"old"}}},
	}, {
		name:    "other devices for the same container: the record's replace them in place",
		cp:      []checkpoint.PodDevicesEntry{claim("a", "app", "g3"), claim("b", "app", "g1")},
		records: []checkpoint.PodDevicesEntry{claim("a", "app", "g1")},
		keep:    []checkpoint.PodDevicesEntry{claim("a", "app", "g1"), claim("b", "app", "g1")},
		found: []Disagreement{{PodUID: "a", ContainerName: "app", ResourceName: "gpu", Recorded: []string{"g1"},
			Checkpointed: []string{"g3"}, HeldByOthers: []string{"b"}}},
	}, {
		name:    "an init container handing its device to the app container is no disagreement",
		cp:      []checkpoint.PodDevicesEntry{claim("a", "init", "g1"), claim("a", "app", "g1")},
		records: []checkpoint.PodDevicesEntry{claim("a", "init", "g1"), claim("a", "app", "g1")},
		keep:    []checkpoint.PodDevicesEntry{claim("a", "init", "g1"), claim("a", "app", "g1")},
	}, {
		name: "same devices on other NUMA nodes agree",
		cp: []checkpoint.PodDevicesEntry{{PodUID: "a", ContainerName: "app", ResourceName: "gpu",
			DeviceIDs: checkpoint.DevicesPerNUMA{0: {"g1"}, 1: {"g2"}}}},
		records: []checkpoint.PodDevicesEntry{{PodUID: "a", ContainerName: "app", ResourceName: "gpu",
			DeviceIDs: checkpoint.DevicesPerNUMA{1: {"g2", "g1"}}}},
		keep: []checkpoint.PodDevicesEntry{{PodUID: "a", ContainerName: "app", ResourceName: "gpu",
			DeviceIDs: checkpoint.DevicesPerNUMA{0: {"g1"}, 1: {"g2"}}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cp := append([]checkpoint.PodDevicesEntry(nil), tc.cp...)
			keep, found := CompareRecords(cp, tc.records)
			if diff := cmp.Diff(tc.keep, keep); diff != "" {
				t.Errorf("kept entries (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.found, found); diff != "" {
				t.Errorf("disagreements (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.cp, cp); diff != "" {
				t.Errorf("the checkpoint's entries were modified (-before +after):\n%s", diff)
			}
		})
	}
}

package devicemanager

import (
	"fmt"
	"slices"

	"github.com/kdm-project/kdm/internal/checkpoint"
	"github.com/kdm-project/kdm/internal/state"
)

// RecordDisagreement is one container's resource for which the checkpoint read at Start and
// the embedder's records (Sources.RecoveredAllocations) disagreed: the checkpoint named other
// devices for it, or none, or gave some of the recorded devices to other pods, as a stale
// checkpoint put in place while the node agent was down does.
type RecordDisagreement = state.Disagreement

// RecordDisagreements returns what the restore at Start found between the checkpoint and the
// embedder's records, in the records' order; nil when they agreed, when the checkpoint was not
// used, or when there were no records. Under Policy.KeepRecordedDevices each recorded device
// was kept for its pod; otherwise the checkpoint was followed, as the kubelet does.
func (m *Manager) RecordDisagreements() []RecordDisagreement {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.disagreements)
}

// compareRecords is readCheckpoint's answer for a checkpoint that decodes: it compares the
// checkpoint's assignments with the embedder's records, logs and counts each disagreement,
// and keeps it for RecordDisagreements. Without a disagreement, or when the policy follows the
// checkpoint (the kubelet, which keeps no records), it returns the function that restores the
// checkpoint. Under Policy.KeepRecordedDevices it restores at once the checkpoint with each
// record's entries in place of the checkpoint's (state.CompareRecords), so that a device the
// record of a running pod names goes to no other pod, and writes that back as the checkpoint.
func (m *Manager) compareRecords(data *checkpoint.Data, entries []*checkpoint.Entry, layout checkpoint.Layout) (applyLocked func(), err error) {
	apply := func() { m.applyCheckpointLocked(data, entries, layout) }
	if len(m.sources.RecoveredAllocations) == 0 {
		return apply, nil
	}
	keep, found := state.CompareRecords(data.PodDeviceEntries, m.sources.RecoveredAllocations)
	if len(found) == 0 {
		return apply, nil
	}
	keeping := m.cfg.Policy.KeepRecordedDevices
	m.metrics.disagreements.Add(float64(len(found)))
	for _, d := range found {
		kv := []any{"path", m.store.Path(), "podUID", d.PodUID, "containerName", d.ContainerName, "resourceName", d.ResourceName,
			"recorded", d.Recorded, "checkpointed", d.Checkpointed, "heldByOtherPods", d.HeldByOthers}
		if keeping {
			m.log.Error(nil, "Checkpoint disagrees with the pod's own record; the recorded devices stay with the pod and go to no other", kv...)
		} else {
			m.log.Error(nil, "Checkpoint disagrees with the pod's own record; following the checkpoint, as the kubelet does (policy kdm keeps the recorded devices)", kv...)
		}
	}
	m.mu.Lock()
	m.disagreements = found
	m.mu.Unlock()
	if !keeping {
		return apply, nil
	}
	merged := *data
	merged.PodDeviceEntries = keep
	m.mu.Lock()
	m.applyCheckpointLocked(&merged, nil, layout)
	m.mu.Unlock()
	if err := m.writeCheckpoint(); err != nil {
		return nil, fmt.Errorf("writing the checkpoint with the recorded devices: %w", err)
	}
	return nil, nil
}

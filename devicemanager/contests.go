package devicemanager

import "github.com/kdm-project/kdm/internal/state"

// Contest is a device that the restored assignments of more than one pod name: a checkpoint
// that lists it under two pods, or, when the checkpoint was lost, embedder records
// (Sources.RecoveredAllocations) that disagree, as when one pod's record was edited to claim
// another's device. Which claim is true cannot be told, so the manager keeps them all: the
// device stays assigned to every claimant (GetDevices, the checkpoint), it is allocated to no
// other pod, and once only one claimant is left it is that pod's alone, the pod being named
// on Updates so that its status drops the conflict. The devices of a claimant that nobody
// else names stay with it as usual.
//
// An operator resolves a contest by removing the pod that should not hold the device (its
// manifest, or the Pod object); a device whose claimants are all gone is free again. The
// checkpoint written after the restore names the device under every claimant, so correcting
// the embedder's record later changes nothing.
type Contest = state.Contest

// Contests returns every contested device, sorted by resource and device ID.
func (m *Manager) Contests() []Contest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.Contests()
}

// ContestsOf returns the contested devices the pod claims, sorted by resource and device ID;
// nil when it claims none.
func (m *Manager) ContestsOf(podUID string) []Contest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.ContestsOf(podUID)
}

// logContestsLocked reports every contested device after a restore, with what resolves it.
// Callers hold mu.
func (m *Manager) logContestsLocked() {
	for _, c := range m.st.Contests() {
		m.log.Error(nil, "Restored assignments of several pods claim one device; it stays assigned to all of them "+
			"and is allocated to no other pod until only one of them is left (remove the pod that should not hold it)",
			"resourceName", c.Resource, "deviceID", c.DeviceID, "podUIDs", c.PodUIDs)
	}
}

// notifySettledLocked names on Updates the pods whose contests ended (the other claimants
// are gone), so that their status stops reporting the conflict. Callers hold mu; the send
// does not block.
func (m *Manager) notifySettledLocked() {
	uids := m.st.TakeSettled()
	if len(uids) == 0 {
		return
	}
	m.log.Info("Contested devices are held by a single pod again", "podUIDs", uids)
	m.notify("", uids)
}

package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kdm-project/kdm/endpoint"
	"github.com/kdm-project/kdm/internal/checkpoint"
)

// snapshotLocked builds the checkpoint content from the current state. Callers hold mu.
func (m *Manager) snapshotLocked() *checkpoint.Prepared { return m.st.Prepared() }

// writeCheckpoint writes the current state durably. Writers are serialised and each takes its
// snapshot after acquiring the write lock, so the file never goes back to an older state.
func (m *Manager) writeCheckpoint() error {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	return m.writeCheckpointLocked()
}

// writeCheckpointLocked is writeCheckpoint for callers that hold writeMu.
func (m *Manager) writeCheckpointLocked() error {
	m.mu.Lock()
	data := m.snapshotLocked()
	m.mu.Unlock()
	if m.store == nil {
		return errors.New("checkpoint store is not open: the manager has not been started")
	}
	// A write that changes nothing a restart reads (a device list, a health flip) asks for no
	// directory sync: a crash that undoes it loses nothing (the store syncs it all the same
	// when it writes through its spare).
	view := restartViewOf(data)
	write := m.store.WritePrepared
	if m.synced.equal(view) {
		write = m.store.WritePreparedNoDirSync
	}
	if err := write(data); err != nil {
		m.synced = restartView{}
		return fmt.Errorf("failed to write checkpoint file %q: %w", checkpoint.FileName, err)
	}
	m.synced = view
	return nil
}

// WaitForCheckpointWrites returns once every checkpoint write whose change is already visible
// (in GetCapacity, say) has reached the disk. With Policy.CoalesceDeviceListWrites, device-list
// writes still queued are not waited for. A write that a crash may undo (a health flip) has its
// file on disk by then; its name is durable too when it went through the store's spare, and
// otherwise once the next write syncs the directory.
func (m *Manager) WaitForCheckpointWrites() {
	m.writeMu.Lock()
	//lint:ignore SA2001 waiting for the writer to let go is the point
	m.writeMu.Unlock()
}

// persistDeviceListsLocked writes a device-list change at once, for callers that hold writeMu.
func (m *Manager) persistDeviceListsLocked() {
	if err := m.writeCheckpointLocked(); err != nil {
		m.log.Error(err, "Writing checkpoint encountered")
	}
}

// persistDeviceLists records a device-list change on disk: at once, as the kubelet does, or,
// with Policy.CoalesceDeviceListWrites, by the background writer, which folds a burst of
// updates into one write. Errors are logged: a device list is not worth failing a stream.
func (m *Manager) persistDeviceLists() {
	if !m.cfg.Policy.CoalesceDeviceListWrites {
		if err := m.writeCheckpoint(); err != nil {
			m.log.Error(err, "Writing checkpoint encountered")
		}
		return
	}
	select {
	case m.writeRequests <- struct{}{}:
	default: // a write is already queued; it will take the latest snapshot
	}
}

// coalesceWindow is how long the background writer waits for more device-list updates before
// writing them in one go.
const coalesceWindow = 10 * time.Millisecond

// runCheckpointWriter serves persistDeviceLists' requests until ctx ends, then performs the
// last queued write, so Stop leaves the latest device lists on disk.
func (m *Manager) runCheckpointWriter(ctx context.Context) {
	write := func() {
		if err := m.writeCheckpoint(); err != nil {
			m.log.Error(err, "Writing checkpoint encountered")
		}
	}
	for {
		select {
		case <-m.writeRequests:
			// Let a burst of updates (health flapping, a plugin re-sending its list) gather
			// into this write; device lists are not read back on restart, so the delay
			// risks nothing. The window runs on the manager's clock.
			timer := m.cfg.Clock.NewTimer(coalesceWindow)
			select {
			case <-timer.C():
			case <-ctx.Done():
			}
			timer.Stop()
			write()
		case <-ctx.Done():
			select {
			case <-m.writeRequests:
				write()
			default:
			}
			return
		}
	}
}

// readCheckpoint reads the checkpoint, whose assignments and registered resources the
// returned function (for a caller holding mu) restores. Each registered resource gets empty
// device sets and a stopped placeholder endpoint, so it reports capacity 0 until its plugin
// registers again and is removed when the grace period ends.
//
// When the checkpoint is missing or unusable (corrupt, empty, a layout the policy does not
// read) and the embedder handed over its own record of the assignments
// (Sources.RecoveredAllocations), those are restored at once instead, and written back as a
// valid checkpoint, so no running container's devices go to another; there is then no
// function. A checkpoint that decodes is compared with those records (compareRecords). A file
// that exists but cannot be read (permissions, I/O, not a regular file) is an
// error: the caller refuses to start rather than replace it.
func (m *Manager) readCheckpoint() (applyLocked func(), err error) {
	data, entries, layout, err := m.store.ReadEntries()
	switch {
	case err == nil && layout == checkpoint.LayoutV1 && !m.cfg.Policy.ReadLegacyCheckpoint:
		err = fmt.Errorf("checkpoint %s has the pre-1.20 layout, which no supported kubelet reads (Policy.ReadLegacyCheckpoint restores it)", m.store.Path())
		m.log.Error(err, "Continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date")
		return nil, m.recoverAllocations("legacy layout not read")
	case err == nil:
		return m.compareRecords(data, entries, layout)
	case errors.Is(err, checkpoint.ErrNotFound):
		m.log.Info("Checkpoint not found; starting with empty device state", "path", m.store.Path())
		return nil, m.recoverAllocations("checkpoint not found")
	case errors.Is(err, checkpoint.ErrCorrupt):
		m.log.Error(err, "Continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date")
		return nil, m.recoverAllocations("checkpoint corrupt")
	case m.cfg.ContinueOnUnreadableCheckpoint:
		m.log.Error(err, "Continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date")
		return nil, nil
	default:
		return nil, &UnreadableCheckpointError{Path: m.store.Path(), Err: err}
	}
}

// applyCheckpointLocked restores the assignments and registered resources of a checkpoint
// read with Store.ReadEntries. Callers hold mu.
func (m *Manager) applyCheckpointLocked(data *checkpoint.Data, entries []*checkpoint.Entry, layout checkpoint.Layout) {
	bad := m.st.Restore(data, entries, m.cfg.Clock.Now())
	for _, e := range bad {
		m.log.Error(nil, "Skipped checkpoint entry whose allocation response does not decode",
			"podUID", e.PodUID, "containerName", e.ContainerName, "resourceName", e.ResourceName)
	}
	for _, res := range m.st.Listed() {
		m.addPlaceholderLocked(res)
	}
	m.logContestsLocked()
	if log := m.log.V(2); log.Enabled() { // counting the pods sorts their UIDs
		log.Info("Restored device state from checkpoint", "path", m.store.Path(),
			"layout", layout, "pods", len(m.st.PodUIDs()), "resources", len(data.RegisteredDevices))
	}
}

// UnreadableCheckpointError is Start's error for a checkpoint file that exists but cannot be
// read for a reason other than its content: permissions, I/O, a directory or FIFO in its
// place. The file is left exactly as it was.
type UnreadableCheckpointError struct {
	Path string
	Err  error
}

func (e *UnreadableCheckpointError) Error() string {
	return fmt.Sprintf("cannot read the device checkpoint %s: %v; refusing to start so that the assignments it holds are not replaced (fix the file's permissions or remove it)", e.Path, unwrapFileError(e.Err))
}

func (e *UnreadableCheckpointError) Unwrap() error { return e.Err }

// unwrapFileError drops the *checkpoint.FileError wrapper, whose path the caller names already.
func unwrapFileError(err error) error {
	var fe *checkpoint.FileError
	if errors.As(err, &fe) {
		return fe.Err
	}
	return err
}

// addPlaceholderLocked makes res a known resource with no devices and a stopped endpoint,
// until its plugin registers. Callers hold mu.
func (m *Manager) addPlaceholderLocked(res string) {
	if _, ok := m.endpoints[res]; ok {
		return
	}
	ep := endpoint.NewStopped(res, m.cfg.Endpoint)
	m.st.AddRestored(res, ep.StopTime())
	m.endpoints[res] = endpointInfo{ep: ep}
}

// recoverAllocations restores the embedder's record of the assignments (RecoveredAllocations)
// in place of a checkpoint that is missing or unusable, and writes it back as a valid
// checkpoint. A device that the records of several pods claim is contested (see Contest):
// every record is restored whole, so the device stays assigned to each claimant, is given to
// no other pod, and is written to the checkpoint under each of them, where the next start
// finds the contest again. Each restored resource is known until its plugin registers, as if
// it came from the checkpoint.
func (m *Manager) recoverAllocations(why string) error {
	if len(m.sources.RecoveredAllocations) == 0 {
		return nil
	}
	entries := m.sources.RecoveredAllocations
	m.mu.Lock()
	bad := m.st.Recover(entries, m.cfg.Clock.Now())
	for _, e := range bad {
		m.log.Error(nil, "Skipped recovered assignment whose allocation response does not decode",
			"podUID", e.PodUID, "containerName", e.ContainerName, "resourceName", e.ResourceName)
	}
	m.logContestsLocked()
	pods := m.st.PodUIDs()
	m.recovered = map[string]sets.Set[string]{}
	for _, res := range m.st.AllocatedResources() {
		m.addPlaceholderLocked(res)
		m.recovered[res] = m.st.Allocated(res)
	}
	m.mu.Unlock()
	m.log.Info("Restored device assignments from the embedder's records; the checkpoint could not be used",
		"path", m.store.Path(), "reason", why, "pods", len(pods), "entries", len(entries)-len(bad))
	if err := m.writeCheckpoint(); err != nil {
		return fmt.Errorf("writing the recovered checkpoint: %w", err)
	}
	return nil
}

// checkRecoveredLocked compares the devices of recovered assignments with the first device
// list the resource's plugin sends, and logs those it does not list. They stay assigned: the
// plugin may list them later, and a running container holds them either way. Callers hold mu.
func (m *Manager) checkRecoveredLocked(res string) {
	ids, ok := m.recovered[res]
	if !ok {
		return
	}
	delete(m.recovered, res)
	var missing []string
	for _, id := range sets.List(ids) {
		if !m.st.IsListed(res, id) {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		m.log.Info("Warning: recovered assignments name devices the plugin does not list; they stay assigned",
			"resourceName", res, "deviceIDs", missing)
	}
}

package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/endpoint"
)

// snapshotLocked builds the checkpoint data from the current state. Callers hold mu.
func (m *ManagerImpl) snapshotLocked() *checkpoint.Data {
	reg := make(map[string][]string, len(m.healthy))
	for res, ids := range m.healthy {
		reg[res] = sets.List(ids)
	}
	return &checkpoint.Data{PodDeviceEntries: m.pods.entries(), RegisteredDevices: reg}
}

// writeCheckpoint writes the current state durably. Writers are serialised and each takes its
// snapshot after acquiring the write lock, so the file never goes back to an older state.
func (m *ManagerImpl) writeCheckpoint() error {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	return m.writeCheckpointLocked()
}

// writeCheckpointLocked is writeCheckpoint for callers that hold writeMu.
func (m *ManagerImpl) writeCheckpointLocked() error {
	m.mu.Lock()
	data := m.snapshotLocked()
	m.mu.Unlock()
	if m.store == nil {
		return errors.New("checkpoint store is not open: the manager has not been started")
	}
	if err := m.store.Write(data); err != nil {
		return fmt.Errorf("failed to write checkpoint file %q: %w", checkpoint.FileName, err)
	}
	return nil
}

// FlushCheckpoint writes the current state durably now, whatever writes are pending.
func (m *ManagerImpl) FlushCheckpoint() error { return m.writeCheckpoint() }

// persistDeviceLists records a device-list change on disk: at once, as the kubelet does, or,
// with Policy.CoalesceDeviceListWrites, by the background writer, which folds a burst of
// updates into one write. Errors are logged: a device list is not worth failing a stream.
// WaitForCheckpointWrites returns once every checkpoint write whose change is already visible
// (in GetCapacity, say) has reached the disk. With Policy.CoalesceDeviceListWrites, device-list
// writes still queued are not waited for.
func (m *ManagerImpl) WaitForCheckpointWrites() {
	m.writeMu.Lock()
	//lint:ignore SA2001 waiting for the writer to let go is the point
	m.writeMu.Unlock()
}

// persistDeviceListsLocked writes a device-list change at once, for callers that hold writeMu.
func (m *ManagerImpl) persistDeviceListsLocked() {
	if err := m.writeCheckpointLocked(); err != nil {
		m.log.Error(err, "Writing checkpoint encountered")
	}
}

func (m *ManagerImpl) persistDeviceLists() {
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
func (m *ManagerImpl) runCheckpointWriter(ctx context.Context) {
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
			// risks nothing.
			select {
			case <-time.After(coalesceWindow):
			case <-ctx.Done():
			}
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

// restoreCheckpoint loads the assignments and registered resources from the checkpoint. Each
// registered resource gets empty device sets and a stopped placeholder endpoint, so it reports
// capacity 0 until its plugin registers again and is removed when the grace period ends.
func (m *ManagerImpl) restoreCheckpoint() error {
	data, layout, err := m.store.Read()
	if errors.Is(err, checkpoint.ErrNotFound) {
		m.log.Info("Checkpoint not found; starting with empty device state", "path", m.store.Path())
		return nil
	}
	if err != nil {
		return err
	}
	if layout == checkpoint.LayoutV1 && !m.cfg.Policy.ReadLegacyCheckpoint {
		return fmt.Errorf("checkpoint %s has the pre-1.20 layout, which the kubelet 1.36 does not read (Policy.ReadLegacyCheckpoint restores it)", m.store.Path())
	}
	pods, bad := restorePodDevices(data.PodDeviceEntries)
	for _, e := range bad {
		m.log.Error(nil, "Skipped checkpoint entry whose allocation response does not decode",
			"podUID", e.PodUID, "containerName", e.ContainerName, "resourceName", e.ResourceName)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pods = pods
	m.allocated = pods.devices()
	for res := range data.RegisteredDevices {
		m.healthy[res] = sets.New[string]()
		m.unhealthy[res] = sets.New[string]()
		m.endpoints[res] = endpointInfo{ep: endpoint.NewStopped(res, m.cfg.Endpoint)}
	}
	m.log.V(2).Info("Restored device state from checkpoint", "path", m.store.Path(),
		"layout", layout, "pods", len(pods), "resources", len(data.RegisteredDevices))
	return nil
}

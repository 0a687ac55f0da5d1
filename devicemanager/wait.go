package devicemanager

import (
	"context"
	"errors"
	"fmt"
)

// ErrManagerStopped is returned by WaitForResource when the manager stops, or was never
// started, before the resource became ready.
var ErrManagerStopped = errors.New("device manager is not running")

// WaitForResource blocks until a plugin instance of resource is connected and has sent its
// first device list, so that Allocate sees the plugin's devices (GetCapacity then reports
// the resource's capacity and allocatable). It returns nil at once when that already holds,
// ctx's error (wrapped, naming the resource) when ctx ends first, and ErrManagerStopped when
// the manager is not running or stops meanwhile. It is safe for concurrent use and may be
// called before any plugin registers; it takes the manager's lock only briefly and never
// across a wait, so it delays no admission.
//
// A resource that becomes ready and then loses its plugin is not waited for again: call
// WaitForResource again after the plugin went away to wait for its return.
func (m *Manager) WaitForResource(ctx context.Context, resource string) error {
	m.life.Lock()
	running := m.started && !m.stopped
	var stopping <-chan struct{}
	if running {
		stopping = m.runCtx.Done()
	}
	m.life.Unlock()
	if !running {
		return ErrManagerStopped
	}
	for {
		m.mu.Lock()
		p := m.st.Plugin(resource)
		changed := m.deviceChange
		m.mu.Unlock()
		if p.Connected && p.Listed {
			return nil
		}
		select {
		case <-changed:
		case <-stopping:
			return ErrManagerStopped
		case <-ctx.Done():
			return fmt.Errorf("waiting for device plugin of %s: %w", resource, ctx.Err())
		}
	}
}

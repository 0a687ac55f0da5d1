package state

import (
	"sync/atomic"
	"time"
)

// ResourceCapacity is one resource's entry in a CapacityView.
type ResourceCapacity struct {
	Name string
	Counts
	// Connected: an instance of the plugin is current. StoppedAt is when the last one went
	// away (or when the resource was restored); zero while connected.
	Connected bool
	StoppedAt time.Time
}

// CapacityView is what Capacity would report, resource by resource, as of the last change
// to any resource's device sets or plugin presence: every resource with a device list. A view
// is never modified once published.
type CapacityView []ResourceCapacity

// Expired reports whether a resource of the view has had its plugin away for longer than
// grace at now, so that a capacity check must remove it.
func (v CapacityView) Expired(now time.Time, grace time.Duration) bool {
	for i := range v {
		if !v[i].Connected && now.Sub(v[i].StoppedAt) > grace {
			return true
		}
	}
	return false
}

// capacityCell holds the published CapacityView.
type capacityCell struct{ p atomic.Pointer[CapacityView] }

// CapacityView returns the view as of the state's last change to device sets or plugin
// presence. Unlike the other methods, it may be called concurrently with anything, so that
// readers of capacity (node status) never wait for the owner's lock; it runs no grace-period
// check and removes nothing (see Expired and Capacity).
func (s *State) CapacityView() CapacityView {
	if v := s.capacity.p.Load(); v != nil {
		return *v
	}
	return nil
}

// publishCapacity replaces the published view with the state's current one. Every method that
// changes a resource's sets, its presence or its plugin's presence calls it before returning.
func (s *State) publishCapacity() {
	v := make(CapacityView, 0, len(s.resources))
	for name, r := range s.resources {
		if !r.hasSets() {
			continue
		}
		v = append(v, ResourceCapacity{
			Name:      name,
			Counts:    Counts{Capacity: int64(r.healthy.Len() + r.unhealthy.Len()), Allocatable: int64(r.healthy.Len())},
			Connected: r.connected,
			StoppedAt: r.stoppedAt,
		})
	}
	s.capacity.p.Store(&v)
}

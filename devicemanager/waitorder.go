package devicemanager

import (
	"context"
	"time"
)

// Admissions that wait for a device plugin (Policy.DeferAdmission) are woken together: by a
// device change, when a plugin registers or sends its list, or by one instant of the manager's
// clock, when their deadlines are the same. Woken, they go on in the order they first began to
// wait: each container's allocation that waited ends (or waits again) before a later one that
// was woken with it goes on. So the pods a returning plugin can serve are the first that
// asked, as the kubelet's one-at-a-time admission would have served them, and a pod rejected
// at its deadline is gone before a later waiter's garbage collection looks, not whichever
// goroutine runs first; the simulator (package explore), which runs woken admissions in start
// order, predicts the outcome. Only admissions that waited are ordered so: one that never
// waits, and one still asleep, holds up nobody.

// sleeper is one container's allocation that has waited for a device plugin, from its first
// wait until the allocation ends: its place in the order (ticket) and what wakes it (the
// deadline on the manager's clock, the device-change broadcast it went to sleep on). Its
// fields are guarded by the manager's mu.
type sleeper struct {
	ticket  uint64
	until   time.Time
	changed <-chan struct{}
	// devices is the manager's count of device changes (Manager.deviceChanges) when the
	// sleeper last looked: a change since makes it awake before the broadcast reaches it.
	devices uint64
}

// awake reports whether the sleeper has been woken (or is about to be) and not gone back to
// sleep: the devices changed since it looked (its broadcast may come only after the
// checkpoint write), its broadcast came, or its deadline passed. devices is the manager's
// count of device changes now.
func (w *sleeper) awake(now time.Time, devices uint64) bool {
	if w.devices != devices {
		return true
	}
	select {
	case <-w.changed:
		return true
	default:
		return !now.Before(w.until)
	}
}

// sleepUntil waits for a device change or until the manager's clock reaches until. *waiter
// is the container's place in the order of waiting admissions, taken at its first wait; the
// caller then looks again under lockTurn. It returns ctx's error if ctx ends first.
func (m *Manager) sleepUntil(ctx context.Context, waiter **sleeper, changed <-chan struct{}, devices uint64, until time.Time) error {
	timer := m.cfg.Clock.NewTimer(until.Sub(m.cfg.Clock.Now()))
	defer timer.Stop()
	m.mu.Lock()
	w := m.enterWaitOrderLocked(waiter)
	w.until, w.changed, w.devices = until, changed, devices
	m.signalTurnLocked() // asleep again: later waiters need not wait for it
	m.mu.Unlock()
	select {
	case <-changed:
	case <-timer.C():
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// lockTurn takes mu once no admission that began to wait before this container's is awake,
// and returns holding it, so that the caller decides under the same lock that found it its
// turn: a device change between the two would otherwise let it go ahead of an earlier waiter
// that the change wakes. A container that has not waited has no place and takes mu at once.
// On ctx's end it returns ctx's error without mu.
func (m *Manager) lockTurn(ctx context.Context, waiter **sleeper) error {
	for {
		m.mu.Lock()
		w := *waiter
		if w == nil || !m.earlierAwakeLocked(w) {
			return nil
		}
		turn := m.turnChange
		m.mu.Unlock()
		select {
		case <-turn:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// earlierAwakeLocked reports whether an admission that began to wait before w is awake, so
// goes first. Callers hold mu.
func (m *Manager) earlierAwakeLocked(w *sleeper) bool {
	now := m.cfg.Clock.Now()
	for s := range m.sleepers {
		if s.ticket < w.ticket && s.awake(now, m.deviceChanges) {
			return true
		}
	}
	return false
}

// enterWaitOrder gives the container its place among the waiting admissions, if it has
// none yet. The waits call it before they tell anyone (Config.OnAdmissionDeferred) that the
// admission waits, so that whoever starts the next admission on hearing it starts it after.
func (m *Manager) enterWaitOrder(waiter **sleeper) {
	m.mu.Lock()
	m.enterWaitOrderLocked(waiter)
	m.mu.Unlock()
}

// enterWaitOrderLocked is enterWaitOrder for callers that hold mu; it returns the place.
func (m *Manager) enterWaitOrderLocked(waiter **sleeper) *sleeper {
	if *waiter == nil {
		m.lastTicket++
		*waiter = &sleeper{ticket: m.lastTicket}
		if m.sleepers == nil {
			m.sleepers = map[*sleeper]struct{}{}
		}
		m.sleepers[*waiter] = struct{}{}
	}
	return *waiter
}

// leaveWaitOrder ends the container's place in the order of waiting admissions, if it took
// one, and lets the next go.
func (m *Manager) leaveWaitOrder(waiter **sleeper) {
	if *waiter == nil {
		return
	}
	m.mu.Lock()
	delete(m.sleepers, *waiter)
	m.signalTurnLocked()
	m.mu.Unlock()
}

// signalTurnLocked wakes the admissions waiting for their turn. Callers hold mu.
func (m *Manager) signalTurnLocked() {
	close(m.turnChange)
	m.turnChange = make(chan struct{})
}

// AdmissionsAsleep reports how many admissions wait for a device plugin (Policy.DeferAdmission)
// with nothing to wake them yet: their deadline is ahead on the manager's clock and no device
// changed since they last looked. A harness that drives the manager step by step on a fake
// clock (package scenario) waits until every admission it started has finished or is asleep.
func (m *Manager) AdmissionsAsleep() int {
	now := m.cfg.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for w := range m.sleepers {
		if !w.awake(now, m.deviceChanges) {
			n++
		}
	}
	return n
}

// NextWake returns the earliest moment on the manager's clock at which an admission asleep
// waiting for a device plugin looks again without a device change, and false when none
// sleeps. A harness on a fake clock steps to it, so that each wait ends at its own time.
func (m *Manager) NextWake() (time.Time, bool) {
	now := m.cfg.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Time
	found := false
	for w := range m.sleepers {
		if w.awake(now, m.deviceChanges) {
			continue
		}
		if !found || w.until.Before(next) {
			next, found = w.until, true
		}
	}
	return next, found
}

package deviceplugin

import (
	"context"
	"fmt"
)

// WaitForRegistrations blocks until Registrations() >= n. It returns ctx's error when ctx
// ends first, and an error wrapping ErrStopped when the plugin stops short of n. It is woken
// by each registration, never by polling. It may be called before Start.
func (p *Plugin) WaitForRegistrations(ctx context.Context, n int) error {
	return p.waitUntil(ctx, fmt.Sprintf("%d registrations", n), func() bool { return p.registrations >= n })
}

// WaitForStreams blocks until at least n ListAndWatch streams have been opened in total
// (Calls().ListAndWatch >= n). Errors as for WaitForRegistrations.
func (p *Plugin) WaitForStreams(ctx context.Context, n int) error {
	return p.waitUntil(ctx, fmt.Sprintf("%d ListAndWatch streams", n), func() bool { return p.calls.ListAndWatch >= n })
}

// WaitForCalls blocks until cond holds for the calls received so far. cond gets a private
// copy and runs each time a call is recorded; it must not block. Errors as for
// WaitForRegistrations.
func (p *Plugin) WaitForCalls(ctx context.Context, cond func(Calls) bool) error {
	return p.waitUntil(ctx, "calls condition", func() bool { return cond(p.calls.clone()) })
}

// waitUntil re-evaluates cond (under p.mu) after every notifyLocked until it holds.
func (p *Plugin) waitUntil(ctx context.Context, what string, cond func() bool) error {
	for {
		p.mu.Lock()
		ok, state, changed := cond(), p.state, p.changed
		p.mu.Unlock()
		if ok {
			return nil
		}
		if state == stateStopped {
			return fmt.Errorf("waiting for %s: %w", what, ErrStopped)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

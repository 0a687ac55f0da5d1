package deviceplugin

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watch turns file events into actions until ctx ends: our socket deleted or renamed away →
// serve it again; KubeletSocket created (RegisterWithKubelet mode) → ask the registrar to
// register again. Other events are ignored.
func (p *Plugin) watch(ctx context.Context, fsw *fsnotify.Watcher, kick chan<- struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-fsw.Events:
			if !ok {
				return
			}
			p.handleEvent(ev, kick)
		case err, ok := <-fsw.Errors:
			if !ok {
				return
			}
			p.log.Error(err, "File watcher error", "path", p.cfg.PluginDir)
		}
	}
}

func (p *Plugin) handleEvent(ev fsnotify.Event, kick chan<- struct{}) {
	switch {
	case ev.Name == p.socketPath && ev.Has(fsnotify.Remove|fsnotify.Rename):
		if err := p.ensureListening(); err != nil && !errors.Is(err, ErrStopped) {
			p.log.Error(err, "Failed to serve the device plugin socket again", "path", p.socketPath)
		}
	case ev.Name == p.cfg.KubeletSocket && ev.Has(fsnotify.Create) && p.cfg.Registration == RegisterWithKubelet:
		p.log.Info("Kubelet socket created; registering again", "path", ev.Name)
		select {
		case kick <- struct{}{}:
		default: // a re-registration is already pending
		}
	}
}

// reregister registers again after each kick until ctx ends. An attempt first makes sure our
// socket is served (it may have been deleted just before the kubelet socket appeared), then
// calls Register. Failures are retried with a doubling backoff on p.cfg.Clock; a new kick
// during the wait retries at once with the backoff reset.
func (p *Plugin) reregister(ctx context.Context, kick <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
		if p.registeredToCurrentSocket() {
			// The kick is for the socket the last registration already reached (it was
			// created while the first Register was on its way): registering again would
			// only replace our own instance.
			p.log.V(2).Info("Kubelet socket unchanged since the last registration; not registering again", "path", p.cfg.KubeletSocket)
			continue
		}
		backoff := p.cfg.RetryBackoff
		for attempt := 1; ; attempt++ {
			err := p.ensureListening()
			if err == nil {
				err = p.register(ctx)
			}
			if err == nil || ctx.Err() != nil {
				break
			}
			p.log.Error(err, "Re-registration failed; will retry", "attempt", attempt, "backoff", backoff)
			if !p.sleep(ctx, kick, backoff) {
				backoff = p.cfg.RetryBackoff
				continue
			}
			backoff = min(2*backoff, p.cfg.MaxRetryBackoff)
		}
	}
}

// sleep waits for d on p.cfg.Clock. It returns true when d passed, false when a kick came
// first or ctx ended (the caller's next attempt then sees the cancelled ctx and stops).
func (p *Plugin) sleep(ctx context.Context, kick <-chan struct{}, d time.Duration) bool {
	t := p.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-kick:
		return false
	case <-ctx.Done():
		return false
	}
}

// socketIdentity names one incarnation of a socket file. A socket created again may reuse
// the inode number, but not its change time.
type socketIdentity struct {
	dev, ino uint64
	ctime    int64 // nanoseconds
}

// identityOf returns the identity of the file at path, or false if it cannot be stat'ed.
func identityOf(path string) (socketIdentity, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return socketIdentity{}, false
	}
	return socketIdentity{dev: uint64(st.Dev), ino: st.Ino, ctime: st.Ctim.Nano()}, true
}

// registeredToCurrentSocket reports whether the last successful Register went to the
// kubelet socket that exists now.
func (p *Plugin) registeredToCurrentSocket() bool {
	now, ok := identityOf(p.cfg.KubeletSocket)
	p.mu.Lock()
	defer p.mu.Unlock()
	return ok && p.registeredTo != nil && *p.registeredTo == now
}

package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Start brings the plugin up, in this order: create PluginDir (and WatcherDir) if missing;
// watch PluginDir (and KubeletSocket's directory) for file events; remove a stale socket at
// SocketPath (one that refuses connections; a live socket fails Start with ErrSocketInUse,
// any other file with ErrNotSocket, and neither is touched), listen and serve; in
// PluginWatcher mode, do the same for the registry socket;
// in RegisterWithKubelet mode, make one Register call (bounded by ctx and RegisterTimeout).
// The background work starts before that Register and runs until Stop:
//   - when SocketPath is deleted (the manager's start-up cleanup), listen and serve it again,
//     at once, even while the first Register still waits for kubelet.sock;
//   - in RegisterWithKubelet mode, whenever KubeletSocket is created (a kubelet restart),
//     register again, retrying with a doubling backoff (RetryBackoff..MaxRetryBackoff on
//     Clock) until it succeeds or the plugin stops.
//
// Every Register is sent only once SocketPath is served, so the manager's dial finds it.
//
// ctx bounds only the start-up; the plugin runs until Stop. A Stop that races with a
// successful start-up wins, and Start still returns nil. Any failure stops the plugin (it
// cannot be started again) and is returned; a refused Register wraps ErrRegistration
// and the gRPC error. A second Start returns ErrAlreadyStarted, a Start after Stop
// ErrStopped.
func (p *Plugin) Start(ctx context.Context) error {
	p.mu.Lock()
	switch p.state {
	case stateRunning:
		p.mu.Unlock()
		return ErrAlreadyStarted
	case stateStopped:
		p.mu.Unlock()
		return ErrStopped
	}
	p.state = stateRunning
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	life := p.ctx
	fsw, err := p.startLocked()
	if err != nil {
		p.mu.Unlock()
		p.Stop()
		return err
	}
	kick := make(chan struct{}, 1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() { _ = fsw.Close() }()
		p.watch(life, fsw, kick)
	}()
	p.mu.Unlock()

	retry := false
	if p.cfg.Registration == RegisterWithKubelet {
		// The first Register is bounded by the caller's ctx and also ends if Stop is called.
		rctx, cancel := context.WithCancel(ctx)
		stopRegister := context.AfterFunc(life, cancel)
		if _, err := os.Stat(p.cfg.KubeletSocket); err != nil {
			// Say at once where the plugin waits: a wrong directory or a manager that has
			// not started yet is otherwise silent until the wait ends.
			p.log.Info("Waiting for the kubelet's registration socket", "path", p.cfg.KubeletSocket, "err", err)
		}
		err := p.register(rctx)
		stopRegister()
		cancel()
		switch {
		case err == nil:
		case life.Err() != nil: // Stop was called meanwhile
			return fmt.Errorf("%w while registering", ErrStopped)
		case ctx.Err() != nil: // the caller is shutting down: no failure to report
			p.log.V(2).Info("Registration abandoned: shutting down", "path", p.cfg.KubeletSocket)
			p.Stop()
			return fmt.Errorf("%w while registering: %w", ErrStopped, ctx.Err())
		case p.cfg.KeepRegistering:
			p.log.Error(err, "Device plugin failed to register; retrying in the background")
			retry = true
		default:
			p.log.Error(err, "Device plugin failed to register; stopping")
			p.Stop()
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != stateRunning {
		// Stop raced with a successful start-up: that is the caller's Stop, not our failure.
		return nil
	}
	if p.cfg.Registration == RegisterWithKubelet {
		if retry {
			select {
			case kick <- struct{}{}:
			default: // a kick is already pending
			}
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.reregister(life, kick)
		}()
	}
	p.log.Info("Device plugin started", "path", p.socketPath, "registration", p.cfg.Registration)
	return nil
}

// startLocked does Start's synchronous part up to registration. p.mu must be held. On error
// everything it created is released by Stop, except the file watcher, which it closes; on
// success the caller owns the returned watcher.
func (p *Plugin) startLocked() (*fsnotify.Watcher, error) {
	dirs := []string{p.cfg.PluginDir}
	if d := filepath.Dir(p.cfg.KubeletSocket); p.cfg.Registration == RegisterWithKubelet && d != p.cfg.PluginDir {
		dirs = append(dirs, d)
	}
	for _, d := range append(dirs, p.cfg.WatcherDir) {
		if d == "" {
			continue
		}
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("creating directory %s: %w", d, err)
		}
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("creating file watcher: %w", err)
	}
	for _, d := range dirs {
		if err := fsw.Add(d); err != nil {
			_ = fsw.Close()
			return nil, fmt.Errorf("watching %s: %w", d, err)
		}
	}
	opts := []grpc.ServerOption{grpc.WaitForHandlers(true)}
	if p.cfg.UnaryInterceptor != nil {
		opts = append(opts, grpc.UnaryInterceptor(p.cfg.UnaryInterceptor))
	}
	if p.cfg.StreamInterceptor != nil {
		opts = append(opts, grpc.StreamInterceptor(p.cfg.StreamInterceptor))
	}
	p.server = grpc.NewServer(opts...)
	pluginapi.RegisterDevicePluginServer(p.server, &devicePluginServer{p: p})
	if p.cfg.Registration == PluginWatcher {
		registerapi.RegisterRegistrationServer(p.server, &registryServer{p: p})
	}
	if p.sock, err = p.listenLocked(p.socketPath); err != nil {
		_ = fsw.Close()
		return nil, err
	}
	if p.registryPath != "" {
		// After the DevicePlugin socket, so that the endpoint GetInfo names already works.
		if p.reg, err = p.listenLocked(p.registryPath); err != nil {
			_ = fsw.Close()
			return nil, err
		}
	}
	return fsw, nil
}

// Stop ends the plugin: no new RPCs or registrations, every ListAndWatch stream ends (the
// client sees the end of the stream or the connection close), hung RPCs return Unavailable,
// the sockets are removed if they are still ours, and every goroutine the plugin started is
// joined before Stop returns. It is idempotent and safe to call concurrently (later calls
// wait for the first to finish), before Start, or after a failed Start. It must not be
// called from inside one of the plugin's own RPC callbacks (it waits for them to return).
func (p *Plugin) Stop() { p.stopOnce.Do(p.stop) }

func (p *Plugin) stop() {
	p.mu.Lock()
	wasRunning := p.state == stateRunning
	p.state = stateStopped
	cancel, server, sock, reg := p.cancel, p.server, p.sock, p.reg
	close(p.done)
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if server != nil {
		server.Stop() // closes listeners and connections, waits for handlers
	}
	p.wg.Wait()
	for _, s := range []*servedSocket{sock, reg} {
		if s == nil {
			continue
		}
		if err := s.removeIfOurs(); err != nil {
			p.log.Error(err, "Failed to remove device plugin socket", "path", s.path)
		}
	}
	if wasRunning {
		p.log.Info("Device plugin stopped", "path", p.socketPath)
	}
}

// Run starts the plugin, waits until ctx ends or the plugin is stopped by someone else (see
// Done), then stops it. It returns Start's error, else nil.
func (p *Plugin) Run(ctx context.Context) error {
	if err := p.Start(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, ErrStopped) {
			return nil // shut down before the first registration finished
		}
		return err
	}
	select {
	case <-ctx.Done():
	case <-p.done:
	}
	p.Stop()
	return nil
}

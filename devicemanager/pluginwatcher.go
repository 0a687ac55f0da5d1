package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/kdm-project/kdm/endpoint"
)

// watcherRPCTimeout bounds GetInfo and NotifyRegistrationStatus on a plugins_registry socket.
const watcherRPCTimeout = 10 * time.Second

// startPluginWatcher serves the plugins_registry registration path: every socket that appears
// in PluginWatcherDir (names starting with "." are ignored) is asked for its PluginInfo and, if
// it is a device plugin, connected as if it had called Register; the plugin is told the result.
// When the socket disappears, the resource is disconnected, but only if the instance that
// registered through that socket is still the current one.
func (m *Manager) startPluginWatcher(ctx context.Context) error {
	dir := m.cfg.PluginWatcherDir
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("creating plugin watcher directory: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("starting plugin watcher: %w", err)
	}
	if err := w.Add(dir); err != nil {
		_ = w.Close()
		return fmt.Errorf("watching %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		_ = w.Close()
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer func() { _ = w.Close() }()
		registered := map[string]*endpoint.Endpoint{} // registry socket → instance it registered
		for _, e := range entries {
			m.watcherAdd(ctx, filepath.Join(dir, e.Name()), registered)
		}
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				switch {
				case ev.Has(fsnotify.Create):
					m.watcherAdd(ctx, ev.Name, registered)
				case ev.Has(fsnotify.Remove), ev.Has(fsnotify.Rename):
					m.watcherRemove(ev.Name, registered)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				m.log.Error(err, "Plugin watcher error", "path", dir)
			}
		}
	}()
	return nil
}

func (m *Manager) watcherAdd(ctx context.Context, path string, registered map[string]*endpoint.Endpoint) {
	if strings.HasPrefix(filepath.Base(path), ".") {
		return
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return
	}
	log := m.log.WithValues("path", path)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Error(err, "Failed to connect to plugin registration socket")
		return
	}
	defer func() { _ = conn.Close() }()
	client := registerapi.NewRegistrationClient(conn)
	rctx, cancel := context.WithTimeout(ctx, watcherRPCTimeout)
	defer cancel()
	info, err := client.GetInfo(rctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		log.Error(err, "Failed to get plugin info")
		return
	}
	if info.Type != registerapi.DevicePlugin {
		return
	}
	ep, regErr := m.registerWatchedPlugin(ctx, path, info)
	if m.testHookAfterWatcherConnect != nil {
		m.testHookAfterWatcherConnect()
	}
	status := &registerapi.RegistrationStatus{PluginRegistered: regErr == nil}
	if regErr != nil {
		status.Error = regErr.Error()
		log.Error(regErr, "Failed to register device plugin from plugin watcher", "resourceName", info.Name)
	} else {
		// The instance this socket registered, not whichever is current now: another
		// registration of the resource may already have replaced it.
		registered[path] = ep
	}
	if _, err := client.NotifyRegistrationStatus(rctx, status); err != nil {
		log.Error(err, "Failed to notify plugin of its registration status", "resourceName", info.Name)
	}
}

// registerWatchedPlugin validates a plugins_registry device plugin and connects to it. The
// endpoint is used as given (symlinks resolved), or the registry socket itself when empty.
func (m *Manager) registerWatchedPlugin(ctx context.Context, path string, info *registerapi.PluginInfo) (*endpoint.Endpoint, error) {
	if !slices.Contains(info.SupportedVersions, pluginapi.Version) {
		return nil, fmt.Errorf("manager version, %s, is not among plugin supported versions %v", pluginapi.Version, info.SupportedVersions)
	}
	if !isExtendedResourceName(info.Name) {
		return nil, fmt.Errorf("invalid name of device plugin socket: %s", info.Name)
	}
	ep := info.Endpoint
	if ep == "" {
		ep = path
	}
	if !filepath.IsAbs(ep) {
		return nil, errors.New("plugin endpoint must be an absolute path: " + ep)
	}
	// Resolved, so that a socket reached through a symlink has the one name the socket
	// ownership check compares (the endpoint may lie anywhere, as with the kubelet).
	resolved, err := resolveSocketPath(ep)
	if err != nil {
		return nil, fmt.Errorf("plugin endpoint %s: %w", ep, err)
	}
	return m.connect(ctx, info.Name, resolved, ep)
}

func (m *Manager) watcherRemove(path string, registered map[string]*endpoint.Endpoint) {
	ep, ok := registered[path]
	if !ok {
		return
	}
	delete(registered, path)
	m.mu.Lock()
	current := m.endpoints[ep.ResourceName()].ep == ep
	m.mu.Unlock()
	if m.rules.WatcherRemoval(current) {
		m.log.V(2).Info("Device plugin socket removed; disconnecting", "resourceName", ep.ResourceName(), "path", path, "current", current)
		ep.Stop()
	}
}

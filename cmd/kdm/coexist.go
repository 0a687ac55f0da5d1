package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent"
)

// coexistDialTimeout bounds the probe of another process's socket: a live listener accepts
// at once and a stale socket file refuses at once, so the bound only matters for a listener
// that has stopped accepting.
const coexistDialTimeout = time.Second

// ErrSocketInUse is returned by checkSocketsFree when another process serves one of the
// sockets kdm would create.
var ErrSocketInUse = errors.New("socket in use")

// checkSocketsFree makes sure no live process answers on any of the given unix sockets, the
// ones kdm is about to remove and create again: the Registration socket (kubelet.sock in the
// device-plugin directory) and the podresources socket. Starting anyway would take the
// socket away from a running kubelet, or another kdm, and its plugins. A socket file nobody
// listens on (left by a process that crashed) and a missing file are fine: kdm replaces the
// former. Each path is dialled with a short timeout.
func checkSocketsFree(paths ...string) error {
	for _, path := range paths {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			continue
		}
		conn, err := net.DialTimeout("unix", path, coexistDialTimeout)
		if err == nil {
			_ = conn.Close()
			return fmt.Errorf("%s: %w: a kubelet's device manager or another kdm answers on it; "+
				"stop that process, or give kdm other directories (--device-plugin-dir, --root-dir)", path, ErrSocketInUse)
		}
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) {
			continue // a stale socket file, or gone meanwhile: kdm replaces it
		}
		var netErr net.Error
		if errors.Is(err, syscall.EAGAIN) || errors.As(err, &netErr) && netErr.Timeout() {
			return fmt.Errorf("%s: %w: a process listens on it but did not accept within %s; "+
				"stop that process, or give kdm other directories (--device-plugin-dir, --root-dir)", path, ErrSocketInUse, coexistDialTimeout)
		}
		// Not a socket, or not ours to dial: kdm's own start-up reports what it finds there.
	}
	return nil
}

// servedSockets are the sockets the agent of cfg will serve, which a kubelet also serves at
// the same default paths: kubelet.sock in the device-plugin directory and the podresources
// socket under the root directory.
func servedSockets(cfg agent.Config) []string {
	if cfg.RootDir == "" {
		cfg.RootDir = agent.DefaultRootDir
	}
	if cfg.DevicePluginDir == "" {
		cfg.DevicePluginDir = pluginapi.DevicePluginPath
	}
	return []string{filepath.Join(cfg.DevicePluginDir, filepath.Base(pluginapi.KubeletSocket)), cfg.PodResourcesSocket()}
}

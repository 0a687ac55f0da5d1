package deviceplugin

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"

	"google.golang.org/grpc"
)

// servedSocket is one unix socket the gRPC server accepts on. The file's identity (inode)
// is remembered so that we only ever re-create or delete our own file, never a socket some
// other process has since put at the same path.
type servedSocket struct {
	path string
	l    *net.UnixListener
	info os.FileInfo
}

// state reports whether the file at the path is still ours, and whether anything is there.
func (s *servedSocket) state() (ours, exists bool) {
	fi, err := os.Lstat(s.path)
	if err != nil {
		return false, !errors.Is(err, fs.ErrNotExist)
	}
	return os.SameFile(fi, s.info), true
}

// removeIfOurs deletes the socket file if it is still the one we created.
func (s *servedSocket) removeIfOurs() error {
	if ours, _ := s.state(); !ours {
		return nil
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing socket %s: %w", s.path, err)
	}
	return nil
}

// maxListenAttempts bounds how often listenLocked creates a socket that vanishes at once.
const maxListenAttempts = 3

// probeTimeout bounds the connection attempt that tells a live socket from a stale one.
const probeTimeout = time.Second

// removeStale makes way for a new socket at path. Nothing there: nothing to do. A socket that
// refuses connections (left behind by a process that has exited) is removed. Anything else is
// left alone and reported: a socket some process accepts connections on (another plugin, or
// a second copy of this one) wraps ErrSocketInUse, a file that is not a socket wraps
// ErrNotSocket, and a socket whose state the probe cannot tell (a full backlog, no
// permission, no answer within probeTimeout) is treated as live.
func removeStale(path string) error {
	before, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("inspecting %s: %w", path, err)
	case before.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("%w: %s is a %s; remove it by hand if it is not needed", ErrNotSocket, path, fileKind(before.Mode()))
	}
	conn, err := net.DialTimeout("unix", path, probeTimeout)
	if err == nil {
		_ = conn.Close()
		return fmt.Errorf("%w: a process accepts connections on %s (another device plugin, or a second copy of this one: give it another socket name)", ErrSocketInUse, path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed meanwhile
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w: probing %s: %w", ErrSocketInUse, path, err)
	}
	// Remove only the file just probed, not one that replaced it meanwhile.
	if now, err := os.Lstat(path); err != nil || !os.SameFile(before, now) {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("%w: %s changed while it was probed", ErrSocketInUse, path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	return nil
}

// fileKind names a non-socket file type for an error message.
func fileKind(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "regular file"
	case fs.ModeDir:
		return "directory"
	case fs.ModeSymlink:
		return "symbolic link"
	case fs.ModeNamedPipe:
		return "named pipe"
	default:
		return "file of mode " + m.Type().String()
	}
}

// listenLocked clears path (see removeStale: only a socket no process listens on is
// removed), listens there and starts serving p.server on it in a goroutine joined by Stop.
// p.mu must be held and p.server set. The probe of an existing socket is a local connect
// bounded by probeTimeout, not an RPC.
//
// A socket deleted between its creation and the look at its file (a manager's start-up
// cleanup running just then) is created again, a few times at most.
func (p *Plugin) listenLocked(path string) (*servedSocket, error) {
	var (
		l    *net.UnixListener
		info os.FileInfo
		err  error
	)
	for attempt := 1; ; attempt++ {
		if err := removeStale(path); err != nil {
			return nil, err
		}
		l, err = net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			return nil, fmt.Errorf("listening on %s: %w", path, err)
		}
		// We delete the file ourselves, and only while it is ours: closing a listener
		// whose file was removed and re-created by someone else must not delete their file.
		l.SetUnlinkOnClose(false)
		info, err = os.Lstat(path)
		if err == nil {
			break
		}
		_ = l.Close()
		if !errors.Is(err, fs.ErrNotExist) || attempt == maxListenAttempts {
			return nil, fmt.Errorf("inspecting new socket %s: %w", path, err)
		}
	}
	s := &servedSocket{path: path, l: l, info: info}
	server := p.server
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		err := server.Serve(l)
		if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, grpc.ErrServerStopped) {
			p.log.Error(err, "Device plugin gRPC server failed", "path", path)
		}
	}()
	p.log.V(2).Info("Serving device plugin socket", "path", path)
	return s, nil
}

// ensureListening re-creates the DevicePlugin socket if its file has disappeared (the
// manager's start-up cleanup deletes every socket in the directory). In PluginWatcher mode
// it then re-creates the registry socket too, so that the watcher sees a new socket and asks
// for the (new) endpoint again. A path now held by another file is left alone and reported.
// Returns ErrStopped once the plugin is stopping.
func (p *Plugin) ensureListening() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != stateRunning || p.ctx.Err() != nil {
		return ErrStopped
	}
	ours, exists := p.sock.state()
	switch {
	case ours:
		return nil
	case exists:
		return fmt.Errorf("socket %s was replaced by a file this plugin did not create", p.socketPath)
	}
	p.log.Info("Device plugin socket was removed; serving it again", "path", p.socketPath)
	_ = p.sock.l.Close() // its Serve loop ends; open connections and streams carry on
	sock, err := p.listenLocked(p.socketPath)
	if err != nil {
		return err
	}
	p.sock = sock
	if p.reg == nil {
		return nil
	}
	if err := p.reg.removeIfOurs(); err != nil {
		return err
	}
	_ = p.reg.l.Close()
	reg, err := p.listenLocked(p.registryPath)
	if err != nil {
		return err
	}
	p.reg = reg
	return nil
}

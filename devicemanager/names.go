package devicemanager

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kdm-project/kdm/internal/resourcename"
)

// isExtendedResourceName is the kubelet's rule for a Register's resource name.
func isExtendedResourceName(name string) bool { return resourcename.IsExtended(name) }

// pluginSocketPath resolves a Register request's Endpoint to the socket kdm dials. The kubelet
// joins and cleans the path, which lets "../x" escape the directory and, since the join is
// lexical, lets a symlink (the socket itself or a directory on the way) lead anywhere. kdm
// refuses an endpoint that is not a plain local path below dir, and one whose resolved path
// (see resolveSocketPath) leaves dir once dir's own symlinks are resolved too; so a plugin
// directory behind a symlinked /var/lib/kubelet keeps working. Endpoints without a ".sock"
// suffix and real subdirectories are accepted. The returned path is the resolved one.
//
// Resolution is a check at registration time: whoever can rename files in dir after it
// could still swap the socket, as with any path-based unix-socket dial.
func pluginSocketPath(dir, endpoint string) (string, error) {
	if endpoint == "" || !filepath.IsLocal(endpoint) {
		return "", fmt.Errorf("invalid endpoint %q: must name a socket inside %s", endpoint, dir)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("resolving device plugin directory %s: %w", dir, err)
	}
	resolved, err := resolveSocketPath(filepath.Join(dir, endpoint))
	if err != nil {
		return "", fmt.Errorf("invalid endpoint %q in %s: %w", endpoint, dir, err)
	}
	rel, err := filepath.Rel(realDir, resolved)
	if err != nil || rel == "." || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("invalid endpoint %q: it resolves to %s, outside the device plugin directory %s", endpoint, resolved, dir)
	}
	return resolved, nil
}

// resolveSocketPath returns the symlink-free form of the absolute socket path p: its parent
// directory is resolved (it must exist), then the final component, if it is a symlink. A final
// component that does not exist yet is kept as named, so that dialling it fails (or waits) as
// the kubelet's dial does. Two endpoints that reach the same socket resolve to the same path.
func resolveSocketPath(p string) (string, error) {
	parent, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return "", fmt.Errorf("resolving the socket's directory: %w", err)
	}
	full := filepath.Join(parent, filepath.Base(p))
	fi, err := os.Lstat(full)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return full, nil
	case err != nil:
		return "", err
	case fi.Mode()&fs.ModeSymlink == 0:
		return full, nil
	}
	target, err := filepath.EvalSymlinks(full)
	if err != nil {
		return "", fmt.Errorf("resolving symlink %s: %w", full, err)
	}
	return target, nil
}

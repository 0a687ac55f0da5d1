package manifests

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// Manifest directory events are acted on once they pause for eventQuiet, or after
// eventBurstMax.
const (
	eventQuiet    = 20 * time.Millisecond
	eventBurstMax = 250 * time.Millisecond
)

// manifestDir tracks whether the pod manifest directory exists and keeps one inotify watch
// pointed at the right place: on the directory itself while it exists, otherwise on its closest
// existing ancestor, so that creating the directory (mkdir -p included) wakes the watch loop.
// The agent never creates the directory: a mistyped --pod-manifest-path is logged at start and
// watched until it appears, as the kubelet does with its static pod path. The resync tick covers
// any event missed while the watch moves.
//
// A manifestDir is owned by the watchManifests goroutine and is not safe for concurrent use.
type manifestDir struct {
	path    string
	w       *fsnotify.Watcher
	log     logr.Logger
	watched string // the path holding the watch, "" if none
	present bool   // path exists and is a directory, and watched == path
	missing bool   // its absence was logged and its appearance is not yet
}

// check brings the watch in line with the file system and reports whether the directory can
// be listed now. Each change (missing, appeared, removed) is logged once.
func (d *manifestDir) check() bool {
	for range 8 { // each round moves the watch one level down; a deeper mkdir -p is caught by the tick
		fi, err := os.Stat(d.path)
		switch {
		case err == nil && fi.IsDir():
			if d.watched != d.path {
				d.move(d.path) // on failure the resync tick still reads the directory
			}
			if d.missing {
				d.log.Info("Pod manifest path appeared; admitting its pods", "path", d.path)
				d.missing = false
			}
			d.present = true
			return true
		case err == nil:
			if !d.missing {
				d.log.Error(nil, "Pod manifest path is not a directory; watching for a directory to replace it", "path", d.path)
				d.missing = true
			}
		case errors.Is(err, fs.ErrNotExist):
			if !d.missing {
				if d.present {
					d.log.Info("Pod manifest path was removed; its pods stay until it is back or their files are removed from it", "path", d.path)
				} else {
					d.log.Info("Pod manifest path does not exist; watching for it to appear", "path", d.path)
				}
				d.missing = true
			}
		default:
			if !d.missing {
				d.log.Error(err, "Pod manifest path cannot be read; retrying on every resync", "path", d.path)
				d.missing = true
			}
		}
		d.present = false
		parent := closestExistingAncestor(d.path)
		if parent == d.watched {
			return false
		}
		d.move(parent)
		// The directory may have been created between the stat and the new watch: look again.
	}
	return false
}

// move points the watch at dir, dropping the previous one. A watch that cannot be added is
// logged at verbosity 4 and left to the resync tick.
func (d *manifestDir) move(dir string) {
	if d.watched != "" {
		_ = d.w.Remove(d.watched) // fails harmlessly when the watched directory is gone
		d.watched = ""
	}
	if dir == "" {
		return
	}
	if err := d.w.Add(dir); err != nil {
		d.log.V(4).Info("Cannot watch directory; relying on the resync period", "path", dir, "err", err)
		return
	}
	d.watched = dir
}

// closestExistingAncestor returns the nearest parent of path that is an existing directory, or
// "" when there is none.
func closestExistingAncestor(path string) string {
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir
		}
		if next := filepath.Dir(dir); next == dir {
			return ""
		}
	}
}

// waitBurst is called on a directory event: it waits for the burst of events to end (at most
// eventBurstMax), so that files moved in together are read, and admitted, together. It
// returns false when ctx ends first.
func (d *manifestDir) waitBurst(ctx context.Context, clk clock.Clock) bool {
	quiet := clk.NewTimer(eventQuiet)
	defer quiet.Stop()
	limit := clk.NewTimer(eventBurstMax)
	defer limit.Stop()
	for {
		select {
		case <-d.w.Events:
			quiet.Reset(eventQuiet)
		case <-quiet.C():
			return true
		case <-limit.C():
			return true
		case <-ctx.Done():
			return false
		}
	}
}

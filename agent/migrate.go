package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// migrateResults moves the pod results an earlier version wrote to <RootDir>/pods, a
// directory the kubelet also uses, into the results directory. Only kdm's own files move:
// regular *.json files holding a pod result. A result of the same pod already present in
// the results directory (a regular file that reads as a result with the same UID) wins; the
// old copy is then removed. Anything else at the destination name (a symbolic link, a
// directory, a FIFO, an unreadable file, another pod's result) is left alone and so is the
// old copy, which may be the pod's only one: that is logged. Failures are logged too: the
// results left behind are not lost, only not read.
func (a *Agent) migrateResults() {
	legacy := a.cfg.legacyPodsDir()
	if filepath.Clean(legacy) == filepath.Clean(a.cfg.PodsDir()) {
		return
	}
	entries, err := os.ReadDir(legacy)
	if err != nil {
		return
	}
	moved := 0
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
			continue
		}
		from, to := filepath.Join(legacy, name), filepath.Join(a.cfg.PodsDir(), name)
		old, err := readResult(from)
		if err != nil {
			continue // not kdm's, or not usable: left alone
		}
		if _, err := os.Lstat(to); err == nil {
			if err := sameResult(old, to); err != nil {
				a.log.Error(err, "Pod result not moved: its name in the results directory is taken; keeping the old copy",
					"path", from, "destination", to, "podUID", old.UID)
				continue
			}
			if err := os.Remove(from); err != nil {
				a.log.Error(err, "Failed to remove a pod result already in the results directory", "path", from)
			}
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			a.log.Error(err, "Failed to move a pod result to the results directory", "path", from)
			continue
		}
		if err := os.Rename(from, to); err != nil {
			a.log.Error(err, "Failed to move a pod result to the results directory", "path", from)
			continue
		}
		moved++
	}
	if moved > 0 {
		a.log.Info("Moved pod results to their own directory", "from", legacy, "to", a.cfg.PodsDir(), "count", moved)
	}
}

// sameResult returns nil when path is a regular file holding a result of old's pod, so that
// the old copy may go; otherwise why not.
func sameResult(old *PodResult, path string) error {
	r, err := readResult(path) // refuses symbolic links and non-regular files
	if err != nil {
		return err
	}
	if r.UID != old.UID {
		return fmt.Errorf("pod result %s: belongs to pod UID %q, not %q", path, r.UID, old.UID)
	}
	return nil
}

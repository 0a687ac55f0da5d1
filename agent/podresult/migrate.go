package podresult

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"
)

// Migrate moves the pod results an earlier version wrote to legacyDir (<RootDir>/pods, a
// directory the kubelet also uses) into dir, the results directory, which must exist. Only
// kdm's own files move: regular *.json files holding a pod result. A result of the same pod
// already present in dir (a regular file that reads as a result with the same UID) wins; the
// old copy is then removed. Anything else at the destination name (a symbolic link, a
// directory, a FIFO, an unreadable file, another pod's result) is left alone and so is the old
// copy, which may be the pod's only one: that is logged. Failures are logged too: the results
// left behind are not lost, only not read. Migrate does nothing when the two are one directory.
func Migrate(log logr.Logger, legacyDir, dir string) {
	if filepath.Clean(legacyDir) == filepath.Clean(dir) {
		return
	}
	entries, err := os.ReadDir(legacyDir)
	if err != nil {
		return
	}
	moved := 0
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
			continue
		}
		from, to := filepath.Join(legacyDir, name), filepath.Join(dir, name)
		old, err := ReadFile(from)
		if err != nil {
			continue // not kdm's, or not usable: left alone
		}
		if _, err := os.Lstat(to); err == nil {
			if err := sameResult(old, to); err != nil {
				log.Error(err, "Pod result not moved: its name in the results directory is taken; keeping the old copy",
					"path", from, "destination", to, "podUID", old.UID)
				continue
			}
			if err := os.Remove(from); err != nil {
				log.Error(err, "Failed to remove a pod result already in the results directory", "path", from)
			}
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			log.Error(err, "Failed to move a pod result to the results directory", "path", from)
			continue
		}
		if err := os.Rename(from, to); err != nil {
			log.Error(err, "Failed to move a pod result to the results directory", "path", from)
			continue
		}
		moved++
	}
	if moved > 0 {
		log.Info("Moved pod results to their own directory", "from", legacyDir, "to", dir, "count", moved)
	}
}

// sameResult returns nil when path is a regular file holding a result of old's pod, so that
// the old copy may go; otherwise why not.
func sameResult(old *PodResult, path string) error {
	r, err := ReadFile(path) // refuses symbolic links and non-regular files
	if err != nil {
		return err
	}
	if r.UID != old.UID {
		return fmt.Errorf("pod result %s: belongs to pod UID %q, not %q", path, r.UID, old.UID)
	}
	return nil
}

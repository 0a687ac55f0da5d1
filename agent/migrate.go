package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// migrateResults moves the pod results an earlier version wrote to <RootDir>/pods, a
// directory the kubelet also uses, into the results directory. Only kdm's own files move:
// regular *.json files holding a pod result. A result already present in the results
// directory wins; the old copy is then removed. Failures are logged: the results left behind
// are not lost, only not read.
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
		if _, err := readResult(from); err != nil {
			continue // not kdm's, or not usable: left alone
		}
		if _, err := os.Lstat(to); err == nil {
			_ = os.Remove(from)
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

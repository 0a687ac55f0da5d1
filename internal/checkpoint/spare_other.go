//go:build !linux

package checkpoint

import (
	"fmt"
	"io/fs"
	"os"
)

// replaceViaSpare never writes outside Linux, which alone can exchange two names atomically:
// every write there goes through a new temporary file.
func (s *Store) replaceViaSpare(writeFunc, *slotImage) (patched, done bool, err error) {
	return false, false, nil
}

// lockForRead takes no lock outside Linux: no spare is ever overwritten there.
func lockForRead(string) func(*os.File, fs.FileInfo) error { return nil }

// startWriteback does nothing here: the fsync that follows a write writes the file back.
func startWriteback(*os.File, int64, int64) {}

// fsyncDir fsyncs the directory dir.
func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory for sync: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

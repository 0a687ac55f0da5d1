package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadRefusesNonRegularFiles: a FIFO or a directory in the checkpoint's place is reported
// at once (a FIFO never blocks the reader), is not ErrCorrupt, and is neither quarantined nor
// replaced.
func TestReadRefusesNonRegularFiles(t *testing.T) {
	for name, plant := range map[string]func(string) error{
		"fifo":      func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"directory": func(p string) error { return os.Mkdir(p, 0o700) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			if err := plant(path); err != nil {
				t.Fatal(err)
			}
			s, err := NewStore(StoreConfig{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = s.Read()
			var fe *FileError
			if err == nil || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotFound) || !errors.As(err, &fe) {
				t.Fatalf("Read = %v, want a FileError that is neither corrupt nor not-found", err)
			}
			if !strings.Contains(err.Error(), "not a regular file") {
				t.Fatalf("error %q does not say what is wrong", err)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Fatalf("directory holds %d entries after Read, want only the planted file", len(entries))
			}
		})
	}
}

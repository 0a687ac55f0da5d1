package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestWriteOverNonRegularFile: a FIFO in the checkpoint's place does not block a write (the
// file being replaced is only referenced, never opened for reading), and the write leaves the
// checkpoint a regular file that reads back.
func TestWriteOverNonRegularFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	s := newTestStore(t, StoreConfig{Dir: dir})
	done := make(chan error, 1)
	go func() { done <- s.Write(sampleData()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Write over a FIFO: %v", err)
		}
	case <-time.After(10 * time.Second):
		// Unblock the writer so that the test ends without a stuck goroutine.
		if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			_ = f.Close()
		}
		<-done
		t.Fatal("Write blocked on the FIFO in the checkpoint's place")
	}
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("after the write the checkpoint is %v (%v), want a regular file", fi, err)
	}
	if _, _, err := s.Read(); err != nil {
		t.Fatalf("Read after the write: %v", err)
	}
}

// TestNoReplacedFileHeld: once writes that replace a large checkpoint return and Close
// returns, the process holds no reference to a replaced file (no open descriptor of a deleted
// file in the directory), and later writes still work.
func TestNoReplacedFileHeld(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, StoreConfig{Dir: dir})
	big := sampleData()
	big.PodDeviceEntries[0].AllocResp = make([]byte, 2<<20)
	for range 3 {
		if err := s.Write(big); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if held := deletedFilesOpenIn(t, dir); len(held) > 0 {
		t.Fatalf("after Close the process still holds replaced files: %v", held)
	}
	if err := s.Write(big); err != nil {
		t.Fatalf("Write after Close: %v", err)
	}
	if held := deletedFilesOpenIn(t, dir); len(held) > 0 {
		t.Fatalf("a write after Close left replaced files held: %v", held)
	}
	got, _, err := s.Read()
	if err != nil || len(got.PodDeviceEntries[0].AllocResp) != 2<<20 {
		t.Fatalf("Read after the writes: %v", err)
	}
}

// deletedFilesOpenIn lists the targets of this process's descriptors that are deleted files
// of dir.
func deletedFilesOpenIn(t *testing.T, dir string) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var held []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+"/") && strings.HasSuffix(target, " (deleted)") {
			held = append(held, target)
		}
	}
	return held
}

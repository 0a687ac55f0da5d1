package hostfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		path   string
		limit  int64
		follow bool
		want   string // data, or the error text it must contain
		isErr  bool
	}{
		{"regular", regular, 10, false, "hello", false},
		{"unbounded", regular, 0, false, "hello", false},
		{"too large", regular, 4, false, "5 bytes, more than the 4 allowed", true},
		{"fifo never blocks", fifo, 10, true, "not a regular file (a named pipe)", true},
		{"directory", dir, 10, true, "not a regular file (a directory)", true},
		{"character device", "/dev/zero", 10, true, "not a regular file (a character device)", true},
		{"symlink followed", link, 10, true, "hello", false},
		{"symlink refused", link, 10, false, "too many levels of symbolic links", true},
		{"missing", filepath.Join(dir, "missing"), 10, true, "no such file", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			data, fi, err := Read(c.path, c.limit, c.follow)
			if c.isErr {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("Read(%s) = %q, %v; want an error containing %q", c.path, data, err, c.want)
				}
				return
			}
			if err != nil || string(data) != c.want || !fi.Mode().IsRegular() {
				t.Fatalf("Read(%s) = %q, %v, %v; want %q", c.path, data, fi, err, c.want)
			}
		})
	}
	var nr *NotRegularError
	if _, _, err := Read(fifo, 10, true); !errors.As(err, &nr) || nr.Mode&fs.ModeNamedPipe == 0 {
		t.Fatalf("a FIFO gives %v, want a *NotRegularError with its mode", err)
	}
	if _, _, err := Read(filepath.Join(dir, "missing"), 10, true); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing file gives %v, want fs.ErrNotExist", err)
	}
}

// TestReadPastTheStatSize: the buffer is sized from the file's stat, but a file that reports
// less than it holds (a /proc file reports 0) or grows while read is read whole, and a limit
// still applies to what is read, not to the stat.
func TestReadPastTheStatSize(t *testing.T) {
	data, _, err := Read("/proc/self/status", 0, true)
	if err != nil || !strings.Contains(string(data), "VmHWM:") {
		t.Fatalf("Read(/proc/self/status) = %d bytes, %v; want the whole file", len(data), err)
	}
	if _, _, err := Read("/proc/self/status", 16, true); err == nil || !strings.Contains(err.Error(), "grew past the 16 bytes allowed") {
		t.Fatalf("Read(/proc/self/status, limit 16) = %v, want the grew-past error", err)
	}
	long := strings.Repeat("x", 3000)
	got, err := readAll(strings.NewReader(long), 10) // stat said 10 bytes; 3000 came
	if err != nil || string(got) != long {
		t.Fatalf("readAll of 3000 bytes with a 10-byte size = %d bytes, %v", len(got), err)
	}
}

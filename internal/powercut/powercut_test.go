//go:build linux

package powercut

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mount mounts a power-cut file system holding img for the test and unmounts it at cleanup.
func mount(t *testing.T, img *Image) *FS {
	t.Helper()
	SkipUnlessAvailable(t)
	f, err := Mount(t.TempDir(), img)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Error(err)
		}
	})
	return f
}

func writeFile(t *testing.T, path, content string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// content returns name's content in img, or "<absent>".
func content(t *testing.T, img *Image, name string) string {
	t.Helper()
	b, err := img.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantContent(t *testing.T, img *Image, want map[string]string) {
	t.Helper()
	for name, w := range want {
		if got := content(t, img, name); got != w {
			t.Errorf("after the cut %s holds %q, want %q", name, got, w)
		}
	}
}

// durableFile makes name hold content durably, name and all.
func durableFile(t *testing.T, f *FS, name, content string) {
	t.Helper()
	writeFile(t, filepath.Join(f.Dir(), name), content, true)
	syncDir(t, f.Dir())
}

func TestWriteWithoutFsyncIsLost(t *testing.T) {
	f := mount(t, nil)
	durableFile(t, f, "a", "old")
	writeFile(t, filepath.Join(f.Dir(), "a"), "new and longer", false)
	if b, err := os.ReadFile(filepath.Join(f.Dir(), "a")); err != nil || string(b) != "new and longer" {
		t.Fatalf("before the cut the file reads %q, %v", b, err)
	}
	wantContent(t, f.Cut(), map[string]string{"a": "old"})
}

func TestFsyncedWriteStays(t *testing.T) {
	f := mount(t, nil)
	durableFile(t, f, "a", "old")
	writeFile(t, filepath.Join(f.Dir(), "a"), "new", true)
	wantContent(t, f.Cut(), map[string]string{"a": "new"})
}

func TestNewFileWithoutDirFsyncIsLost(t *testing.T) {
	f := mount(t, nil)
	writeFile(t, filepath.Join(f.Dir(), "a"), "data", true) // content synced, name not
	wantContent(t, f.Cut(), map[string]string{"a": "<absent>"})
}

func TestNameWithoutContentSyncIsEmpty(t *testing.T) {
	f := mount(t, nil)
	writeFile(t, filepath.Join(f.Dir(), "a"), "data", false)
	syncDir(t, f.Dir())
	wantContent(t, f.Cut(), map[string]string{"a": ""})
}

func TestRenameWithoutDirFsyncIsLost(t *testing.T) {
	f := mount(t, nil)
	durableFile(t, f, "a", "old")
	writeFile(t, filepath.Join(f.Dir(), "tmp"), "new", true)
	if err := os.Rename(filepath.Join(f.Dir(), "tmp"), filepath.Join(f.Dir(), "a")); err != nil {
		t.Fatal(err)
	}
	wantContent(t, f.Cut(), map[string]string{"a": "old", "tmp": "<absent>"})
}

func TestFsyncedRenameStays(t *testing.T) {
	f := mount(t, nil)
	durableFile(t, f, "a", "old")
	writeFile(t, filepath.Join(f.Dir(), "tmp"), "new", true)
	if err := os.Rename(filepath.Join(f.Dir(), "tmp"), filepath.Join(f.Dir(), "a")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f.Dir())
	wantContent(t, f.Cut(), map[string]string{"a": "new", "tmp": "<absent>"})
}

func TestExchange(t *testing.T) {
	for _, synced := range []bool{false, true} {
		f := mount(t, nil)
		durableFile(t, f, "a", "A")
		durableFile(t, f, "b", "B")
		a, b := filepath.Join(f.Dir(), "a"), filepath.Join(f.Dir(), "b")
		if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(a); string(got) != "B" {
			t.Fatalf("after the exchange a reads %q, want B", got)
		}
		if synced {
			syncDir(t, f.Dir())
			wantContent(t, f.Cut(), map[string]string{"a": "B", "b": "A"})
		} else {
			wantContent(t, f.Cut(), map[string]string{"a": "A", "b": "B"})
		}
	}
}

func TestUnlink(t *testing.T) {
	for _, synced := range []bool{false, true} {
		f := mount(t, nil)
		durableFile(t, f, "a", "A")
		if err := os.Remove(filepath.Join(f.Dir(), "a")); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(f.Dir(), "a")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("after the unlink: %v, want not-exist", err)
		}
		want := "A"
		if synced {
			syncDir(t, f.Dir())
			want = "<absent>"
		}
		wantContent(t, f.Cut(), map[string]string{"a": want})
	}
}

func TestLinkAndNoReplace(t *testing.T) {
	f := mount(t, nil)
	durableFile(t, f, "a", "A")
	if err := os.Link(filepath.Join(f.Dir(), "a"), filepath.Join(f.Dir(), "b")); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(f.Dir(), "a"), &st); err != nil || st.Nlink != 2 {
		t.Fatalf("after the link a has %d names (%v), want 2", st.Nlink, err)
	}
	err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(f.Dir(), "a"), unix.AT_FDCWD, filepath.Join(f.Dir(), "b"), unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EEXIST) {
		t.Fatalf("RENAME_NOREPLACE onto an existing name: %v, want EEXIST", err)
	}
	syncDir(t, f.Dir())
	img := f.Cut()
	wantContent(t, img, map[string]string{"a": "A", "b": "A"})
	out := t.TempDir()
	if err := img.WriteTo(out); err != nil {
		t.Fatal(err)
	}
	var sa, sb unix.Stat_t
	if unix.Stat(filepath.Join(out, "a"), &sa) != nil || unix.Stat(filepath.Join(out, "b"), &sb) != nil || sa.Ino != sb.Ino {
		t.Fatal("the written image lost the hard link")
	}
}

// TestCutAfter checks that a cut after the n-th op keeps exactly the first n ops and that
// every call after it fails.
func TestCutAfter(t *testing.T) {
	f := mount(t, nil)
	durableFile(t, f, "a", "0")
	// Five ops: create tmp, write, fsync, rename, fsync dir (truncate on an empty new file
	// is part of the create).
	update := func(content string) error {
		p := filepath.Join(f.Dir(), "tmp")
		fd, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		defer fd.Close()
		if _, err := fd.WriteString(content); err != nil {
			return err
		}
		if err := fd.Sync(); err != nil {
			return err
		}
		if err := os.Rename(p, filepath.Join(f.Dir(), "a")); err != nil {
			return err
		}
		d, err := os.Open(f.Dir())
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	}
	before := f.Ops()
	if err := update("1"); err != nil {
		t.Fatal(err)
	}
	if n := f.Ops() - before; n != 5 {
		t.Fatalf("an update is %d ops (%q), want 5", n, f.Log(before))
	}
	f.CutAfter(4) // after the rename, before the directory sync
	err := update("2")
	if !errors.Is(err, unix.EIO) {
		t.Fatalf("the update across the cut returned %v, want EIO", err)
	}
	select {
	case <-f.Cutting():
	default:
		t.Fatal("Cutting is not closed after the cut")
	}
	if _, err := os.ReadFile(filepath.Join(f.Dir(), "a")); err == nil {
		t.Error("a read after the cut succeeded")
	}
	img := f.Cut()
	wantContent(t, img, map[string]string{"a": "1", "tmp": "<absent>"})
	if names, _ := img.Names("."); !slices.Equal(names, []string{"a"}) {
		t.Errorf("after the cut the root holds %q, want [a]", names)
	}
}

// TestImageRemount mounts the image a cut left and finds the durable state there.
func TestImageRemount(t *testing.T) {
	f := mount(t, nil)
	if err := os.Mkdir(filepath.Join(f.Dir(), "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f.Dir())
	writeFile(t, filepath.Join(f.Dir(), "d", "x"), "X", true)
	syncDir(t, filepath.Join(f.Dir(), "d"))
	writeFile(t, filepath.Join(f.Dir(), "d", "y"), "Y", true) // name never synced
	g := mount(t, f.Cut())
	if b, err := os.ReadFile(filepath.Join(g.Dir(), "d", "x")); err != nil || string(b) != "X" {
		t.Errorf("remounted d/x reads %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(g.Dir(), "d", "y")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("remounted d/y: %v, want not-exist", err)
	}
	// A directory of an ordinary file system read in is durable as a whole.
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "z"), []byte("Z"), 0o600); err != nil {
		t.Fatal(err)
	}
	img, err := ImageOf(src)
	if err != nil {
		t.Fatal(err)
	}
	h := mount(t, img)
	wantContent(t, h.Cut(), map[string]string{"z": "Z"})
}

// TestUnixSocketsAndLocks checks what the device manager needs beside files: unix sockets
// bound inside the file system and flock.
func TestUnixSocketsAndLocks(t *testing.T) {
	f := mount(t, nil)
	p := filepath.Join(f.Dir(), "s.sock")
	lis, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		c, err := lis.Accept()
		if err == nil {
			_, _ = c.Write([]byte("hi"))
			_ = c.Close()
		}
	}()
	c, err := net.Dial("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := c.Read(buf); err != nil || !bytes.Equal(buf, []byte("hi")) {
		t.Fatalf("reading over the socket: %q, %v", buf, err)
	}
	_ = c.Close()

	durableFile(t, f, "lock", "")
	a, err := os.Open(filepath.Join(f.Dir(), "lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.Open(filepath.Join(f.Dir(), "lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := unix.Flock(int(a.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(b.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("a second exclusive flock: %v, want EWOULDBLOCK", err)
	}
}

// TestWriteBackAtCut: with write-back every write reaches the disk, synced or not, while a
// name still needs its directory's sync.
func TestWriteBackAtCut(t *testing.T) {
	f := mount(t, nil)
	f.WriteBackAtCut()
	durableFile(t, f, "a", "old")
	writeFile(t, filepath.Join(f.Dir(), "a"), "new", false)
	writeFile(t, filepath.Join(f.Dir(), "b"), "B", true)
	wantContent(t, f.Cut(), map[string]string{"a": "new", "b": "<absent>"})
}

package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// generation is a checkpoint whose one registered device names gen, padded to about size
// bytes of AllocResp so that writes and reads take a while.
func generation(gen, size int) *Data {
	d := sampleData()
	d.RegisteredDevices = map[string][]string{"example.com/gen": {fmt.Sprint(gen)}}
	d.PodDeviceEntries[0].AllocResp = bytes.Repeat([]byte{10, 3, 'g', 'e', 'n'}, size/5)
	return d
}

// preparedGeneration is generation(gen, size) as Prepared content.
func preparedGeneration(gen, size int) *Prepared {
	d := generation(gen, size)
	return &Prepared{
		Entries:    []*Entry{NewEntry(d.PodDeviceEntries[0])},
		Registered: []*Registered{NewRegistered("example.com/gen", d.RegisteredDevices["example.com/gen"])},
	}
}

// wantGeneration fails the test unless the checkpoint at path holds generation gen.
func wantGeneration(t *testing.T, path string, gen int) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := genOf(t, raw); got != fmt.Sprint(gen) {
		t.Fatalf("the checkpoint holds generation %s, want %d", got, gen)
	}
}

// genOf is the generation a checkpoint file holds.
func genOf(t *testing.T, raw []byte) string {
	t.Helper()
	d, _, err := Decode(raw)
	if err != nil {
		t.Fatalf("checkpoint does not decode: %v", err)
	}
	return d.RegisteredDevices["example.com/gen"][0]
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// countExchanges counts the calls to exchangeFiles, answering them with fail when it is set.
func countExchanges(t *testing.T, fail error) *atomic.Int32 {
	var n atomic.Int32
	orig := exchangeFiles
	exchangeFiles = func(a, b string) error {
		n.Add(1)
		if fail != nil {
			return fail
		}
		return orig(a, b)
	}
	t.Cleanup(func() { exchangeFiles = orig })
	return &n
}

// TestWriteThroughSpare: once a checkpoint exists, each write fills the spare, which holds an
// earlier checkpoint, and exchanges it with the checkpoint, so that the spare then holds the
// checkpoint just replaced, and each such write syncs the directory before it returns, even
// when the caller did not ask for it. Two files take turns; no second spare is made.
func TestWriteThroughSpare(t *testing.T) {
	for _, later := range []bool{false, true} {
		t.Run(fmt.Sprintf("noDirSync=%t", later), func(t *testing.T) {
			var syncs atomic.Int32
			orig := syncDir
			syncDir = func(dir string) error { syncs.Add(1); return orig(dir) }
			t.Cleanup(func() { syncDir = orig })
			exchanges := countExchanges(t, nil)

			dir := t.TempDir()
			s := newTestStore(t, StoreConfig{Dir: dir})
			spares := [2]string{filepath.Join(dir, SpareFileName), filepath.Join(dir, SecondSpareFileName)}
			if err := s.Write(generation(1, 100)); err != nil {
				t.Fatal(err)
			}
			for _, spare := range spares[:1] {
				if _, err := os.Lstat(spare); !errors.Is(err, os.ErrNotExist) || exchanges.Load() != 0 {
					t.Fatalf("the first write made a spare (%v) or exchanged (%d): it has nothing to exchange with", err, exchanges.Load())
				}
			}
			inodes := map[uint64]bool{}
			filled := 0
			for gen := 2; gen <= 6; gen++ {
				syncs.Store(0)
				write := s.WritePrepared
				if later {
					write = s.WritePreparedNoDirSync
				}
				if err := write(preparedGeneration(gen, 100*gen)); err != nil {
					t.Fatal(err)
				}
				if n := syncs.Load(); n != 1 {
					t.Errorf("write %d through the spare synced the directory %d times, want 1", gen, n)
				}
				wantGeneration(t, s.Path(), gen)
				old, err := os.ReadFile(spares[filled])
				if err != nil || genOf(t, old) != fmt.Sprint(gen-1) {
					t.Fatalf("after write %d the spare it filled (%s) does not hold write %d: %v", gen, filepath.Base(spares[filled]), gen-1, err)
				}
				if fi, err := os.Stat(s.Path()); err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("checkpoint mode %v (%v), want 0600", fi.Mode(), err)
				}
				inodes[inode(t, s.Path())] = true
			}
			if _, err := os.Lstat(spares[1]); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the writes made a second spare (%v)", err)
			}
			files := 2
			if len(inodes) != files || exchanges.Load() != 5 {
				t.Errorf("five writes used %d files and %d exchanges, want %d files and 5 exchanges", len(inodes), exchanges.Load(), files)
			}
			if err := s.Remove(); err != nil {
				t.Fatal(err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("Remove left %v", entries)
			}
		})
	}
}

// TestSpareRefused: whatever sits at a spare's name that is not a regular file of this
// Store's with one name (a symlink, a directory, a FIFO, a file with a second name, a file
// another writer holds) is left untouched, and the write goes through a new temporary file
// instead, whether it asked for a directory sync (second false) or not.
func TestSpareRefused(t *testing.T) {
	for name, plant := range map[string]func(t *testing.T, spare, victim string) func(){
		"symlink":   func(t *testing.T, spare, victim string) func() { must(t, os.Symlink(victim, spare)); return nil },
		"directory": func(t *testing.T, spare, _ string) func() { must(t, os.Mkdir(spare, 0o700)); return nil },
		"fifo":      func(t *testing.T, spare, _ string) func() { must(t, syscall.Mkfifo(spare, 0o600)); return nil },
		"hard link": func(t *testing.T, spare, victim string) func() { must(t, os.Link(victim, spare)); return nil },
		"locked": func(t *testing.T, spare, _ string) func() {
			must(t, os.WriteFile(spare, []byte("precious\n"), 0o600))
			f, err := os.Open(spare)
			must(t, err)
			must(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
			return func() { _ = f.Close() }
		},
	} {
		// After one write there is no spare yet; after three the spare is a file the Store
		// wrote, which the planting removes first.
		for _, writes := range []int{1, 3} {
			for _, second := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s,writes=%d,second=%t", name, writes, second), func(t *testing.T) { spareRefused(t, writes, second, plant) })
			}
		}
	}
}

// spareRefused makes writes writes, replaces the spare with what plant puts there and checks
// that the next write goes through a new temporary file and leaves it alone.
func spareRefused(t *testing.T, writes int, second bool, plant func(t *testing.T, spare, victim string) func()) {
	exchanges := countExchanges(t, nil)
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	must(t, os.WriteFile(victim, []byte("precious\n"), 0o600))
	s := newTestStore(t, StoreConfig{Dir: dir})
	must(t, s.Write(generation(1, 100)))
	for gen := 2; gen <= writes; gen++ {
		if second {
			must(t, s.WritePreparedNoDirSync(preparedGeneration(gen, 100)))
		} else {
			must(t, s.Write(generation(gen, 100)))
		}
	}
	exchanges.Store(0)
	spare := filepath.Join(dir, SpareFileName)
	write := func() error { return s.Write(generation(writes+1, 100)) }
	if second {
		write = func() error { return s.WritePreparedNoDirSync(preparedGeneration(writes+1, 100)) }
	}
	if _, err := os.Lstat(spare); err == nil {
		must(t, os.Remove(spare))
	}
	if release := plant(t, spare, victim); release != nil {
		defer release()
	}
	planted, err := os.Lstat(spare)
	must(t, err)
	done := make(chan error, 1)
	go func() { done <- write() }()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the write is blocked by what sits at the spare's name")
	}
	wantGeneration(t, s.Path(), writes+1)
	if exchanges.Load() != 0 {
		t.Errorf("the write exchanged names %d times through a refused spare", exchanges.Load())
	}
	if got, err := os.ReadFile(victim); err != nil || string(got) != "precious\n" {
		t.Errorf("victim holds %q (%v)", got, err)
	}
	now, err := os.Lstat(spare)
	if err != nil || !os.SameFile(planted, now) || now.Mode() != planted.Mode() {
		t.Errorf("what sits at the spare's name changed: %v (%v)", now, err)
	}
	if planted.Mode().IsRegular() && planted.Sys().(*syscall.Stat_t).Nlink == 1 {
		if got, _ := os.ReadFile(spare); string(got) != "precious\n" {
			t.Errorf("the refused spare was written: %q", got)
		}
	}
}

// TestExchangeUnsupported: on a file system that cannot exchange names, the filled spare is
// renamed into place, and later writes go through new temporary files without trying again.
func TestExchangeUnsupported(t *testing.T) {
	exchanges := countExchanges(t, unix.EINVAL)
	dir := t.TempDir()
	s := newTestStore(t, StoreConfig{Dir: dir})
	for gen := 1; gen <= 4; gen++ {
		must(t, s.Write(generation(gen, 100)))
		wantGeneration(t, s.Path(), gen)
		if _, err := os.Lstat(filepath.Join(dir, SpareFileName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("after write %d a spare is left (%v)", gen, err)
		}
	}
	if exchanges.Load() != 1 {
		t.Errorf("%d exchanges tried, want 1: the first refusal says the file system cannot", exchanges.Load())
	}
}

// TestSpareAfterFailedDirSync: when the directory sync after an exchange fails, the exchange
// may not be on disk, so the spare may still be the checkpoint there: the next write must not
// overwrite it. A write through a new file whose directory sync succeeds makes the spare safe
// again.
func TestSpareAfterFailedDirSync(t *testing.T) {
	exchanges := countExchanges(t, nil)
	failSync := false
	orig := syncDir
	syncDir = func(dir string) error {
		if failSync {
			failSync = false
			return errors.New("injected directory sync failure")
		}
		return orig(dir)
	}
	t.Cleanup(func() { syncDir = orig })

	dir := t.TempDir()
	s := newTestStore(t, StoreConfig{Dir: dir})
	spare := filepath.Join(dir, SpareFileName)
	must(t, s.Write(generation(1, 100)))
	failSync = true
	if err := s.Write(generation(2, 100)); err == nil {
		t.Fatal("the write reported success although its directory sync failed")
	}
	if exchanges.Load() != 1 {
		t.Fatalf("the second write made %d exchanges, want 1", exchanges.Load())
	}
	held, err := os.ReadFile(spare)
	must(t, err)
	must(t, s.Write(generation(3, 100)))
	if exchanges.Load() != 1 {
		t.Errorf("the write after the failed sync exchanged through the spare")
	}
	if got, err := os.ReadFile(spare); err != nil || !bytes.Equal(got, held) {
		t.Errorf("the write after the failed sync changed the spare (%v)", err)
	}
	must(t, s.Write(generation(4, 100)))
	if exchanges.Load() != 2 {
		t.Errorf("after a successful directory sync the spare was not used again (%d exchanges)", exchanges.Load())
	}
	wantGeneration(t, s.Path(), 4)
}

// TestReadersAndWritersOfTwoStores: two Stores of one directory write large checkpoints in a
// loop while a third reads: every write succeeds, every read gives a whole checkpoint (never
// a file being overwritten as a spare), and nothing is quarantined.
func TestReadersAndWritersOfTwoStores(t *testing.T) {
	dir := t.TempDir()
	const size = 4 << 20
	data := [2][]*Data{}
	for w := range data {
		for g := range 2 {
			data[w] = append(data[w], generation(1000*w+g, size))
		}
	}
	writers := [2]*Store{newTestStore(t, StoreConfig{Dir: dir}), newTestStore(t, StoreConfig{Dir: dir})}
	must(t, writers[0].Write(data[0][0]))
	reader := newTestStore(t, StoreConfig{Dir: dir})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w, s := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := s.Write(data[w][i%2]); err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
			}
		}()
	}
	reads := 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); reads++ {
		d, _, err := reader.Read()
		if err != nil {
			errs <- fmt.Errorf("read %d: %w", reads, err)
			break
		}
		if len(d.PodDeviceEntries) != 1 || len(d.PodDeviceEntries[0].AllocResp) != size/5*5 {
			errs <- fmt.Errorf("read %d: not one of the written checkpoints", reads)
			break
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if q, _ := filepath.Glob(filepath.Join(dir, FileName+quarantineInfix+"*")); len(q) != 0 {
		t.Errorf("quarantined: %v", q)
	}
	t.Logf("%d reads", reads)
}

// TestReadWaitsForTheFilesWriter: a Store writing into the file Read opened (it was the
// checkpoint when opened, and has since become a spare being filled) holds an exclusive lock
// on it; Read does not read it until the lock is let go, and then gives a whole checkpoint.
func TestReadWaitsForTheFilesWriter(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, StoreConfig{Dir: dir})
	must(t, s.Write(generation(1, 100)))
	f, err := os.OpenFile(s.Path(), os.O_WRONLY, 0)
	must(t, err)
	defer f.Close()
	must(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))

	type result struct {
		d   *Data
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, _, err := newTestStore(t, StoreConfig{Dir: dir}).Read()
		done <- result{d, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("Read returned (%v) while a writer held the file", r.err)
	case <-time.After(30 * time.Millisecond):
	}
	must(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	r := <-done
	if r.err != nil || r.d.RegisteredDevices["example.com/gen"][0] != "1" {
		t.Fatalf("Read after the writer let go: %v", r.err)
	}
}

// TestSpareFoundAtStart: a new Store keeps the spare a previous one left, and does not write
// into it before a write of its own has synced the directory: the previous Store may have
// stopped right after exchanging it, before the exchange reached the disk. A second spare that
// an earlier version left is removed like any other temporary file.
func TestSpareFoundAtStart(t *testing.T) {
	exchanges := countExchanges(t, nil)
	dir := t.TempDir()
	spare, second := filepath.Join(dir, SpareFileName), filepath.Join(dir, SecondSpareFileName)
	first := newTestStore(t, StoreConfig{Dir: dir})
	must(t, first.Write(generation(1, 100)))
	must(t, first.Write(generation(2, 100)))
	must(t, first.Write(generation(3, 100)))
	must(t, first.Close())
	held, err := os.ReadFile(spare)
	if err != nil || genOf(t, held) != "2" {
		t.Fatalf("the first Store left no spare holding write 2 (%v)", err)
	}
	must(t, os.WriteFile(second, held, 0o600))
	unchanged := func(when string) {
		t.Helper()
		if got, err := os.ReadFile(spare); err != nil || !bytes.Equal(got, held) {
			t.Fatalf("%s: the spare was removed or changed (%v)", when, err)
		}
	}

	exchanges.Store(0)
	s := newTestStore(t, StoreConfig{Dir: dir})
	unchanged("NewStore")
	if _, err := os.Lstat(second); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("NewStore kept the second spare an earlier version left (%v)", err)
	}
	must(t, s.WritePreparedNoDirSync(preparedGeneration(4, 100)))
	must(t, s.WritePreparedNoDirSync(preparedGeneration(5, 100)))
	unchanged("writes before a directory sync")
	if exchanges.Load() != 0 {
		t.Fatalf("the new Store exchanged names %d times before syncing the directory", exchanges.Load())
	}
	must(t, s.Write(generation(6, 100)))
	must(t, s.Write(generation(7, 100)))
	if exchanges.Load() != 1 {
		t.Errorf("after a synced write the new Store did not use the spare (%d exchanges)", exchanges.Load())
	}
	wantGeneration(t, s.Path(), 7)
}

// TestSpareWithAnotherMode: a spare of ours that is not mode 0600 (a kubelet's 0644
// checkpoint, which the first exchange moves to the spare's name) is not written into: it is
// removed, so a process holding it open never reads a later checkpoint through it, and a new
// 0600 spare takes its place in the same write.
func TestSpareWithAnotherMode(t *testing.T) {
	exchanges := countExchanges(t, nil)
	dir := t.TempDir()
	s := newTestStore(t, StoreConfig{Dir: dir})
	must(t, s.Write(generation(1, 100)))
	spare := filepath.Join(dir, SpareFileName)
	must(t, os.WriteFile(spare, []byte("precious\n"), 0o600))
	must(t, os.Chmod(spare, 0o644))
	reader, err := os.Open(spare)
	must(t, err)
	defer reader.Close()

	must(t, s.Write(generation(2, 100)))
	if exchanges.Load() != 1 {
		t.Fatalf("%d exchanges, want the write to go through a new spare", exchanges.Load())
	}
	if got, err := io.ReadAll(reader); err != nil || string(got) != "precious\n" {
		t.Errorf("the 0644 file, still open, now holds %q (%v)", got, err)
	}
	for _, p := range []string{s.Path(), spare} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", p, fi.Mode(), err)
		}
	}
	wantGeneration(t, s.Path(), 2)
}

// TestReadFileThroughSymlink: a checkpoint path that is a symbolic link reads at once (the
// check that the locked file is still the one at the path follows the link), and ReadFile
// refuses a FIFO without blocking; its errors name the path.
func TestReadFileThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, StoreConfig{Dir: dir})
	must(t, s.Write(generation(7, 100)))
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(s.Path(), link))
	f, err := os.Open(link)
	must(t, err)
	defer f.Close()
	fi, err := f.Stat()
	must(t, err)
	if err := lockForRead(link)(f, fi); err != nil {
		t.Fatalf("the lock check on a symlinked path: %v, want nil", err)
	}
	raw, err := ReadFile(link)
	must(t, err)
	wantGeneration(t, link, 7)
	if genOf(t, raw) != "7" {
		t.Fatalf("ReadFile through the link gave generation %s", genOf(t, raw))
	}
	fifo := filepath.Join(dir, "fifo")
	must(t, syscall.Mkfifo(fifo, 0o600))
	if _, err := ReadFile(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), fifo) {
		t.Fatalf("ReadFile of a FIFO: %v, want a not-a-regular-file error naming the path", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadFile of a missing file: %v, want fs.ErrNotExist", err)
	}
}

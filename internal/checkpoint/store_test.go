package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/textlogger"
	clocktesting "k8s.io/utils/clock/testing"
)

// sampleData is a small realistic checkpoint.
func sampleData() *Data {
	return &Data{
		PodDeviceEntries: []PodDevicesEntry{{
			PodUID: "11111111-2222-4333-8444-000000000001", ContainerName: "app", ResourceName: "example.com/gpu",
			DeviceIDs: DevicesPerNUMA{0: {"gpu-0"}, 1: {"gpu-1"}}, AllocResp: []byte{10, 2, 8, 1},
		}},
		RegisteredDevices: map[string][]string{"example.com/gpu": {"gpu-0", "gpu-1"}, "example.com/nic": {}},
	}
}

// tempFiles lists the store's temporary files in dir, but for the spares, which writes
// through them leave on purpose (each holds a checkpoint a write replaced).
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, tempPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(m, func(p string) bool {
		return filepath.Base(p) == SpareFileName || filepath.Base(p) == SecondSpareFileName
	})
}

// newTestStore returns the Store for cfg, closed when the test ends: its goroutines (a
// directory sync left running, a replaced file being released) are done before the
// cleanups the test registered earlier, which may restore what they call.
func newTestStore(t *testing.T, cfg StoreConfig) *Store {
	t.Helper()
	s, err := NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestStoreRoundTrip writes and reads back, and checks the file's bytes,
// mode 0600, and that no temporary file is left.
func TestStoreRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, StoreConfig{Dir: dir})
	if want := filepath.Join(dir, FileName); s.Path() != want {
		t.Errorf("Path = %s, want %s", s.Path(), want)
	}
	want := sampleData()
	if err := s.Write(want); err != nil {
		t.Fatal(err)
	}
	got, layout, err := s.Read()
	if err != nil {
		t.Fatal(err)
	}
	if layout != LayoutV2 {
		t.Errorf("layout = %v", layout)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", fi.Mode().Perm())
	}
	raw, _ := os.ReadFile(s.Path())
	enc, _ := Encode(want)
	if !bytes.Equal(raw, enc) {
		t.Errorf("file = %s, want %s", raw, enc)
	}
	if tf := tempFiles(t, dir); len(tf) != 0 {
		t.Errorf("temporary files left: %v", tf)
	}

	// A second write replaces the first.
	want.RegisteredDevices = nil
	if err := s.Write(want); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.Read(); err != nil || got.RegisteredDevices != nil {
		t.Errorf("after rewrite: %+v, %v", got, err)
	}
}

// TestStoreReadMissing checks a missing file is ErrNotFound with the path.
func TestStoreReadMissing(t *testing.T) {
	s := newTestStore(t, StoreConfig{Dir: t.TempDir()})
	_, _, err := s.Read()
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	var fe *FileError
	if !errors.As(err, &fe) || fe.Path != s.Path() {
		t.Errorf("err = %v, want *FileError for %s", err, s.Path())
	}
	if !strings.Contains(err.Error(), s.Path()) || !strings.Contains(err.Error(), "checkpoint is not found") {
		t.Errorf("message %q lacks path or reason", err)
	}
}

// TestStoreQuarantine checks each kind of unusable file is renamed aside to
// a timestamped name and reported as a *QuarantineError that still matches
// ErrCorrupt and names both paths and the reason.
func TestStoreQuarantine(t *testing.T) {
	now := time.Date(2026, 11, 22, 14, 45, 1, 0, time.FixedZone("CET", 3600))
	cases := []struct {
		name    string
		content []byte
		want    error
		reason  string
	}{
		{"checksum", readGolden(t, "corrupt-checksum"), ErrCorrupt, "stored 2503912198, computed 2503912197"},
		{"empty file", nil, ErrNotJSON, "unexpected end of JSON input"},
		{"torn file", readGolden(t, "1pod-1ctr-1dev")[:200], ErrNotJSON, "not valid JSON"},
		{"unknown layout", []byte(`{"Data":{"PodDeviceEntries":[{"DeviceIDs":true}]}}`), ErrUnknownLayout, "cannot unmarshal bool"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var logs bytes.Buffer
			logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs)))
			s := newTestStore(t, StoreConfig{Dir: dir, Clock: clocktesting.NewFakePassiveClock(now), Logger: logger})
			if err := os.WriteFile(s.Path(), c.content, 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := s.Read()
			var qe *QuarantineError
			if !errors.As(err, &qe) {
				t.Fatalf("err = %v, want *QuarantineError", err)
			}
			wantQ := s.Path() + ".corrupt-20261122T134501Z"
			if qe.Path != s.Path() || qe.QuarantinedAs != wantQ {
				t.Errorf("QuarantineError = %+v, want QuarantinedAs %s", qe, wantQ)
			}
			if !errors.Is(err, c.want) || !errors.Is(err, ErrCorrupt) {
				t.Errorf("err = %v, want errors.Is %v and ErrCorrupt", err, c.want)
			}
			var fe *FileError
			if !errors.As(err, &fe) || fe.Path != s.Path() {
				t.Errorf("no *FileError for the path in %v", err)
			}
			for _, s := range []string{s.Path(), wantQ, c.reason} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message %q does not contain %q", err, s)
				}
			}
			if _, err := os.Stat(s.Path()); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("checkpoint still present after quarantine: %v", err)
			}
			if moved, err := os.ReadFile(wantQ); err != nil || !bytes.Equal(moved, c.content) {
				t.Errorf("quarantined file = %q, %v", moved, err)
			}
			if !strings.Contains(logs.String(), "Quarantined unusable checkpoint file") || !strings.Contains(logs.String(), "quarantinedAs=") {
				t.Errorf("log does not report the quarantine: %s", logs.String())
			}
			// The next read sees a clean start.
			if _, _, err := s.Read(); !errors.Is(err, ErrNotFound) {
				t.Errorf("read after quarantine: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestStoreQuarantineNameCollision checks a second quarantine within the
// same second does not overwrite the first.
func TestStoreQuarantineNameCollision(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 13, 45, 1, 0, time.UTC))
	s := newTestStore(t, StoreConfig{Dir: t.TempDir(), Clock: clk})
	var got []string
	for i := 0; i < 3; i++ {
		if err := os.WriteFile(s.Path(), []byte(fmt.Sprintf("junk %d", i)), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := s.Read()
		var qe *QuarantineError
		if !errors.As(err, &qe) {
			t.Fatalf("err = %v", err)
		}
		got = append(got, filepath.Base(qe.QuarantinedAs))
	}
	want := []string{
		FileName + ".corrupt-20261122T134501Z",
		FileName + ".corrupt-20261122T134501Z-1",
		FileName + ".corrupt-20261122T134501Z-2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for i, name := range want {
		if b, _ := os.ReadFile(filepath.Join(filepath.Dir(s.Path()), name)); string(b) != fmt.Sprintf("junk %d", i) {
			t.Errorf("%s = %q", name, b)
		}
	}
}

// TestStoreQuarantineOff checks the kubelet 1.36 behaviour: the error names
// the path and reason, the file stays, and the next Write replaces it.
func TestStoreQuarantineOff(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, StoreConfig{Dir: dir, OverwriteCorrupt: true})
	corrupt := readGolden(t, "corrupt-checksum")
	if err := os.WriteFile(s.Path(), corrupt, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.Read()
	var qe *QuarantineError
	var ce *ChecksumError
	if err == nil || errors.As(err, &qe) || !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *ChecksumError and no quarantine", err)
	}
	for _, want := range []string{s.Path(), "checkpoint is corrupted", "2503912198"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not contain %q", err, want)
		}
	}
	if b, _ := os.ReadFile(s.Path()); !bytes.Equal(b, corrupt) {
		t.Error("file was changed")
	}
	if m, _ := filepath.Glob(s.Path() + ".corrupt-*"); len(m) != 0 {
		t.Errorf("quarantined files: %v", m)
	}
	if err := s.Write(sampleData()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Read(); err != nil {
		t.Errorf("read after write: %v", err)
	}
}

// TestStoreReadNotCorrupt checks an I/O failure (the path is a directory) is
// reported with the path and is neither ErrCorrupt nor quarantined.
func TestStoreReadNotCorrupt(t *testing.T) {
	s := newTestStore(t, StoreConfig{Dir: t.TempDir()})
	if err := os.Mkdir(s.Path(), 0o700); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.Read()
	var fe *FileError
	if !errors.As(err, &fe) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want a plain *FileError", err)
	}
	if fi, err := os.Stat(s.Path()); err != nil || !fi.IsDir() {
		t.Errorf("directory was moved: %v", err)
	}
}

// TestStoreWriteFailureRemovesTemp makes the final rename fail (the target is
// a non-empty directory) and checks the temporary file is removed and the
// error names the path.
func TestStoreWriteFailureRemovesTemp(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, StoreConfig{Dir: dir})
	if err := os.MkdirAll(filepath.Join(s.Path(), "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	err := s.Write(sampleData())
	var fe *FileError
	if !errors.As(err, &fe) || fe.Path != s.Path() || !strings.Contains(err.Error(), "rename") {
		t.Fatalf("err = %v, want *FileError about the rename", err)
	}
	if tf := tempFiles(t, dir); len(tf) != 0 {
		t.Errorf("temporary files left: %v", tf)
	}
}

// TestStoreWriteInvalidUTF8 checks invalid data is refused before any file
// is touched.
func TestStoreWriteInvalidUTF8(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, StoreConfig{Dir: dir})
	d := sampleData()
	d.PodDeviceEntries[0].ContainerName = "\xc3"
	if err := s.Write(d); !errors.Is(err, ErrInvalidUTF8) {
		t.Fatalf("err = %v, want ErrInvalidUTF8", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("directory not empty: %v", entries)
	}
}

// TestNewStore checks directory creation and that only
// this package's stale temporary files are removed.
func TestNewStore(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "device-plugins")
	stale := filepath.Join(dir, tempPrefix+"123456")
	keep := []string{
		filepath.Join(dir, ".123456"), // the kubelet's own temp file pattern
		filepath.Join(dir, "kubelet.sock.tmp-1"),
		filepath.Join(dir, FileName+".corrupt-20261122T134501Z"),
	}
	s := newTestStore(t, StoreConfig{Dir: dir})
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&^DirMode != 0 {
		t.Fatalf("directory: %v, %v", fi, err)
	}
	for _, p := range append([]string{stale}, keep...) {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, tempPrefix+"dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs), textlogger.Verbosity(2)))
	s2 := newTestStore(t, StoreConfig{Dir: dir, Logger: logger})
	if s2.Path() != s.Path() {
		t.Errorf("paths differ: %s, %s", s2.Path(), s.Path())
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temp file not removed: %v", err)
	}
	for _, p := range append(keep, filepath.Join(dir, tempPrefix+"dir")) {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	if !strings.Contains(logs.String(), "Removed stale checkpoint temporary file") {
		t.Errorf("removal not logged: %s", logs.String())
	}

	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewStore(StoreConfig{Dir: filepath.Join(file, "sub")}); err == nil {
		t.Error("NewStore under a regular file succeeded")
	}
}

// TestStoreRemove checks Remove deletes the file and that removing a
// missing file is not an error.
func TestStoreRemove(t *testing.T) {
	s := newTestStore(t, StoreConfig{Dir: t.TempDir()})
	if err := s.Remove(); err != nil {
		t.Errorf("Remove of missing file: %v", err)
	}
	if err := s.Write(sampleData()); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Read(); !errors.Is(err, ErrNotFound) {
		t.Errorf("Read after Remove: %v", err)
	}
}

// TestStoreConcurrent runs writers and readers together (run with -race):
// every read sees one complete written state and no temporary file is left.
func TestStoreConcurrent(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, StoreConfig{Dir: dir})
	if err := s.Write(sampleData()); err != nil {
		t.Fatal(err)
	}
	const writers, rounds = 4, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds*2)
	for w := 0; w < writers; w++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				d := sampleData()
				d.RegisteredDevices["writer"] = []string{fmt.Sprint(w), fmt.Sprint(i)}
				if err := s.Write(d); err != nil {
					errs <- err
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				if _, _, err := s.Read(); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if tf := tempFiles(t, dir); len(tf) != 0 {
		t.Errorf("temporary files left: %v", tf)
	}
}

// TestStoreWritePreparedNoDirSync: the write without a directory sync replaces the file with
// the same bytes as WritePrepared, leaves no temporary file, and syncs the directory only in
// the durable variants.
func TestStoreWritePreparedNoDirSync(t *testing.T) {
	var syncs int
	orig := syncDir
	syncDir = func(dir string) error { syncs++; return orig(dir) }
	t.Cleanup(func() { syncDir = orig })

	dir := t.TempDir()
	s := newTestStore(t, StoreConfig{Dir: dir})
	d := sampleData()
	p := &Prepared{}
	for _, e := range d.PodDeviceEntries {
		p.Entries = append(p.Entries, NewEntry(e))
	}
	for res, ids := range d.RegisteredDevices {
		p.Registered = append(p.Registered, NewRegistered(res, ids))
	}
	for _, w := range []struct {
		name      string
		write     func(*Prepared) error
		wantSyncs int
	}{
		{"WritePreparedNoDirSync", s.WritePreparedNoDirSync, 0},
		{"WritePrepared", s.WritePrepared, 1},
	} {
		syncs = 0
		if err := os.Remove(s.Path()); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := w.write(p); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		checkHolds(t, s.Path(), p, w.name)
		if syncs != w.wantSyncs {
			t.Errorf("%s synced the directory %d times, want %d", w.name, syncs, w.wantSyncs)
		}
		if tf := tempFiles(t, dir); len(tf) != 0 {
			t.Errorf("%s left temporary files: %v", w.name, tf)
		}
	}
}

// TestWritePreparedLargeRegisteredList writes, through the spare and through new temporary
// files, a checkpoint of a few entries beside a registered list of several MiB, changing an
// entry between writes so that the list follows a new state each time, and a longer file
// than the spare's last. Every file must decode to what was written and verify.
func TestWritePreparedLargeRegisteredList(t *testing.T) {
	ids := make([]string, 200_000)
	for i := range ids {
		ids[i] = fmt.Sprintf("large-device-%07d", i)
	}
	reg := []*Registered{NewRegistered("example.com/large", ids), NewRegistered("example.com/gpu", []string{"gpu-0", "gpu-1"})}
	entry := func(i int) *Entry {
		return NewEntry(PodDevicesEntry{PodUID: fmt.Sprintf("pod-%d", i), ContainerName: "app", ResourceName: "example.com/gpu",
			DeviceIDs: DevicesPerNUMA{0: {fmt.Sprintf("gpu-%d", i%2)}}, AllocResp: []byte{10, 3, 'e', 'n', 'v'}})
	}
	for _, plain := range []bool{false, true} {
		s := newTestStore(t, StoreConfig{Dir: t.TempDir(), PlainWrites: plain})
		for i := range 4 {
			p := &Prepared{Entries: []*Entry{entry(i)}, Registered: reg}
			if i == 3 {
				p.Entries = append(p.Entries, entry(i+1)) // a longer file than the spare's
			}
			if err := s.WritePrepared(p); err != nil {
				t.Fatalf("plain %v, write %d: %v", plain, i, err)
			}
			checkHolds(t, s.Path(), p, fmt.Sprintf("plain %v, write %d", plain, i))
		}
	}
}

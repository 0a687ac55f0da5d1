package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
)

// writeLog records whether each write only patched the spare (the "patched" of the store's
// "Wrote checkpoint file" line).
type writeLog struct {
	mu      sync.Mutex
	patched []bool
}

func (l *writeLog) logger() logr.Logger {
	return funcr.New(func(_, args string) {
		if strings.Contains(args, `"Wrote checkpoint file"`) {
			l.mu.Lock()
			l.patched = append(l.patched, strings.Contains(args, `"patched"=true`))
			l.mu.Unlock()
		}
	}, funcr.Options{Verbosity: 4})
}

// last reports whether the last write patched the spare.
func (l *writeLog) last(t *testing.T) bool {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.patched) == 0 {
		t.Fatal("no write was logged")
	}
	return l.patched[len(l.patched)-1]
}

// entryPool makes entries with increasing pod UIDs, of varied lengths.
type entryPool struct {
	rng  *rand.Rand
	next int
}

func (p *entryPool) entry() *Entry {
	p.next++
	return NewEntry(PodDevicesEntry{
		PodUID:        fmt.Sprintf("11111111-2222-4333-8444-%012d", p.next),
		ContainerName: "app",
		ResourceName:  "example.com/gpu",
		DeviceIDs:     DevicesPerNUMA{0: {fmt.Sprintf("gpu-%d", p.next)}},
		AllocResp:     bytes.Repeat([]byte{10, 3, 'e', 'n', 'v'}, 1+p.rng.IntN(40)),
	})
}

// commonPrefix is the number of leading bytes a and b share.
func commonPrefix(a, b []byte) int64 {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return int64(i)
		}
	}
	return int64(n)
}

// checkHolds reads the checkpoint and checks that it verifies, as kdm reads it and as the
// kubelet does, and holds p's entries (in any order) and registered devices.
func checkHolds(t *testing.T, path string, p *Prepared, what string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := Decode(raw)
	if err != nil {
		t.Fatalf("%s: %v (a file of %d bytes)", what, err, len(raw))
	}
	// The kubelet's way: encoding/json into its types, the checksum over go-spew's dump.
	var kubelet oracleFile
	if err := json.Unmarshal(raw, &kubelet); err != nil {
		t.Fatalf("%s: encoding/json refuses the file: %v", what, err)
	}
	d := &Data{PodDeviceEntries: kubelet.Data.PodDeviceEntries, RegisteredDevices: kubelet.Data.RegisteredDevices}
	if sum := oracleChecksum(d); uint64(sum) != kubelet.Checksum {
		t.Fatalf("%s: the kubelet's checksum of the file is %d, the file says %d", what, sum, kubelet.Checksum)
	}
	want := p.Data()
	byPod := func(a, b PodDevicesEntry) int { return strings.Compare(a.PodUID, b.PodUID) }
	slices.SortFunc(got.PodDeviceEntries, byPod)
	slices.SortFunc(want.PodDeviceEntries, byPod)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s: the checkpoint holds other data (-want +got):\n%s", what, diff)
	}
}

// TestSlottedWritesPatchTheSpare runs a store through random changes of its entries (arriving
// at the end, anywhere, leaving, the same entries again, Data, null and empty lists, new
// registered devices) and checks after each write that the checkpoint verifies and holds the
// data written, and that most writes patched the spare instead of writing it whole.
func TestSlottedWritesPatchTheSpare(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	pool := &entryPool{rng: rng}
	var log writeLog
	s := newTestStore(t, StoreConfig{Dir: t.TempDir(), Logger: log.logger()})
	var entries []*Entry
	reg := []*Registered{NewRegistered("example.com/gpu", []string{"gpu-0"})}
	patched := 0
	const writes = 400
	for step := range writes {
		switch op := rng.IntN(20); {
		case op < 8:
			entries = append(slices.Clone(entries), pool.entry())
		case op < 11 && len(entries) > 0:
			entries = slices.Clone(entries)
			entries[rng.IntN(len(entries))] = pool.entry()
		case op < 15 && len(entries) > 0:
			i := rng.IntN(len(entries))
			entries = slices.Delete(slices.Clone(entries), i, i+1)
		case op < 16:
			reg = []*Registered{NewRegistered("example.com/gpu", []string{fmt.Sprintf("gpu-%d", step)})}
		case op < 17:
			entries = nil
		case op < 18:
			entries = []*Entry{}
		}
		p := &Prepared{Entries: entries, Registered: reg}
		var err error
		switch rng.IntN(8) {
		case 0:
			err = s.Write(p.Data())
		case 1:
			err = s.WritePreparedNoDirSync(p)
		default:
			err = s.WritePrepared(p)
		}
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		checkHolds(t, s.Path(), p, fmt.Sprintf("step %d", step))
		if log.last(t) {
			patched++
		}
	}
	if patched < writes/2 {
		t.Errorf("%d of %d writes patched the spare, want at least half", patched, writes)
	}
}

// TestPreparedWriteDistrustsAChangedFile: a write does not patch a spare that something else
// changed since this store wrote it (in place, at the same size, while it was the spare or
// while it was still the checkpoint, putting its modification time back, or by putting
// another file at its name): it writes it whole, so the checkpoint verifies.
func TestPreparedWriteDistrustsAChangedFile(t *testing.T) {
	flipByte := func(t *testing.T, path string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{'X'}, int64(len(jsonFileHead))+10); err != nil { // inside the first entry
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		// change runs before write number before. The spare the fourth write fills holds the
		// second write's file, made the checkpoint by the second write and moved to the spare
		// by the third: the first that the store knows (the first write made no spare).
		before int
		change func(t *testing.T, dir string)
	}{
		{"nothing", 0, func(*testing.T, string) {}},
		{"spare written in place", 4, func(t *testing.T, dir string) { flipByte(t, dir+"/"+SpareFileName) }},
		{"checkpoint written in place, then moved to the spare", 3, func(t *testing.T, dir string) { flipByte(t, dir+"/"+FileName) }},
		{"spare replaced by a copy of itself, changed", 4, func(t *testing.T, dir string) {
			spare := dir + "/" + SpareFileName
			b, err := os.ReadFile(spare)
			if err != nil {
				t.Fatal(err)
			}
			b[len(jsonFileHead)+10] = 'X'
			must(t, os.WriteFile(spare+".new", b, 0o600))
			must(t, os.Rename(spare+".new", spare))
		}},
		{"spare written in place, its modification time put back", 4, func(t *testing.T, dir string) {
			spare := dir + "/" + SpareFileName
			fi, err := os.Stat(spare)
			if err != nil {
				t.Fatal(err)
			}
			flipByte(t, spare)
			must(t, os.Chtimes(spare, fi.ModTime(), fi.ModTime()))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != 0 && !fineTimestamps(t) {
				t.Skip("this file system's timestamps do not tell apart two writes within a clock tick, which these changes are")
			}
			pool := &entryPool{rng: rand.New(rand.NewPCG(1, 2))}
			var log writeLog
			dir := t.TempDir()
			s := newTestStore(t, StoreConfig{Dir: dir, Logger: log.logger()})
			entries := []*Entry{pool.entry(), pool.entry()}
			reg := []*Registered{NewRegistered("example.com/gpu", []string{"gpu-0"})}
			for write := 1; write <= 4; write++ {
				if write == tc.before {
					tc.change(t, dir)
				}
				entries = append(slices.Clone(entries), pool.entry())
				p := &Prepared{Entries: entries, Registered: reg}
				if err := s.WritePrepared(p); err != nil {
					t.Fatal(err)
				}
				checkHolds(t, s.Path(), p, fmt.Sprintf("write %d", write))
				switch patched := log.last(t); {
				case write == 4 && tc.before != 0 && patched:
					t.Fatalf("write %d patched a changed file", write)
				case write == 4 && tc.before == 0 && !patched:
					t.Fatalf("write %d wrote the unchanged spare whole", write)
				}
			}
		})
	}
}

// fineTimestamps reports whether the temporary directory's file system gives a file written
// right after its times were read a new modification time (Linux 6.13 and later do, on the
// common file systems). Where it does not, a change within a clock tick of a write, at the
// same size, cannot be told from the file's times (see fileID).
func fineTimestamps(t *testing.T) bool {
	path := t.TempDir() + "/probe"
	must(t, os.WriteFile(path, []byte("a"), 0o600))
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(path, []byte("b"), 0o600))
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return !after.ModTime().Equal(before.ModTime())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSlottedChecksumAcrossBlocks writes a file of several checksum blocks, then lets entries
// arrive (new slots past the last block, so new blocks), leave and be replaced anywhere, and
// checks that every checkpoint verifies and holds what was written.
func TestSlottedChecksumAcrossBlocks(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	pool := &entryPool{rng: rng}
	s := newTestStore(t, StoreConfig{Dir: t.TempDir()})
	entries := make([]*Entry, 4*blockSlots-3)
	for i := range entries {
		entries[i] = pool.entry()
	}
	reg := []*Registered{NewRegistered("example.com/gpu", []string{"gpu-0"})}
	for step := range 60 {
		switch op := rng.IntN(4); {
		case op < 2:
			entries = append(slices.Clone(entries), pool.entry())
		case op < 3:
			entries = slices.Clone(entries)
			entries[rng.IntN(len(entries))] = pool.entry()
		default:
			i := rng.IntN(len(entries))
			entries = slices.Delete(slices.Clone(entries), i, i+1)
		}
		p := &Prepared{Entries: entries, Registered: reg}
		if err := s.WritePrepared(p); err != nil {
			t.Fatal(err)
		}
		checkHolds(t, s.Path(), p, fmt.Sprintf("step %d", step))
	}
}

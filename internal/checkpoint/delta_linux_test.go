package checkpoint

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// writeLog records how many bytes of the spare each write kept (the "keptBytes" of the
// store's "Wrote checkpoint file" line).
type writeLog struct {
	mu   sync.Mutex
	kept []int64
}

var keptLine = regexp.MustCompile(`"Wrote checkpoint file".*"keptBytes"=(\d+)`)

func (l *writeLog) logger() logr.Logger {
	return funcr.New(func(_, args string) {
		if m := keptLine.FindStringSubmatch(args); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			l.mu.Lock()
			l.kept = append(l.kept, n)
			l.mu.Unlock()
		}
	}, funcr.Options{Verbosity: 4})
}

// last is the kept bytes of the last write.
func (l *writeLog) last(t *testing.T) int64 {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.kept) == 0 {
		t.Fatal("no write was logged")
	}
	return l.kept[len(l.kept)-1]
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

// TestPreparedWritesKeepWhatTheSpareHolds runs a store through random changes of its entries
// (most arriving at the end, some anywhere, some leaving, some writes of the same entries, of
// Data, of null and empty lists) and checks after each write that the checkpoint holds exactly
// EncodePrepared's bytes and that the spare holds the file before it. Each write keeps exactly
// the entries it shares, from the start, with the file the spare held (sharedPrefix), never
// more bytes than the two files share.
func TestPreparedWritesKeepWhatTheSpareHolds(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	pool := &entryPool{rng: rng}
	var log writeLog
	dir := t.TempDir()
	s := newTestStore(t, StoreConfig{Dir: dir, Logger: log.logger()})
	spare := dir + "/" + SpareFileName

	var entries []*Entry
	for range 50 {
		entries = append(entries, pool.entry())
	}
	reg := []*Registered{NewRegistered("example.com/gpu", []string{"gpu-0"})}
	var prevFile, spareWant []byte
	var written [][]*Entry // each write's entries, nil for Data
	keptHalf := 0
	for step := range 400 {
		p := &Prepared{Registered: reg}
		op := rng.IntN(20)
		switch {
		case op < 8: // a pod arrives after the others
			entries = append(slices.Clone(entries), pool.entry())
		case op < 10: // one arrives anywhere: an entry is replaced by a new one
			if len(entries) > 0 {
				entries = slices.Clone(entries)
				entries[rng.IntN(len(entries))] = pool.entry()
			}
		case op < 14: // one leaves
			if len(entries) > 0 {
				i := rng.IntN(len(entries))
				entries = slices.Delete(slices.Clone(entries), i, i+1)
			}
		case op < 15: // the devices change
			reg = []*Registered{NewRegistered("example.com/gpu", []string{"gpu-" + strconv.Itoa(step)})}
			p.Registered = reg
		case op < 16: // written as Data
		case op < 17:
			entries = nil
		case op < 18:
			entries = []*Entry{}
		}
		p.Entries = entries
		var err error
		if op == 15 {
			err = s.Write(p.Data())
		} else {
			err = s.WritePrepared(p)
		}
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		want, err := EncodePrepared(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(s.Path())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("step %d (op %d): the checkpoint is not EncodePrepared's file; first difference at byte %d of %d, kept %d",
				step, op, commonPrefix(got, want), len(want), log.last(t))
		}
		if _, _, err := Decode(got); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if prevFile != nil {
			if old, err := os.ReadFile(spare); err != nil || !bytes.Equal(old, prevFile) {
				t.Fatalf("step %d: the spare does not hold the previous file (%v)", step, err)
			}
		}
		// The spare holds the file of two writes ago; the store knows it from the third write on
		// (the first makes the checkpoint, the second the spare), if that file was Prepared.
		var wantKept int64
		if step >= 3 && op != 15 {
			wantKept = sharedPrefix(written[step-2], entries)
		}
		written = append(written, nil)
		if op != 15 {
			written[step] = entries
		}
		kept := log.last(t)
		if kept != wantKept {
			t.Fatalf("step %d (op %d): kept %d bytes of the spare, want %d", step, op, kept, wantKept)
		}
		if kept > commonPrefix(spareWant, want) {
			t.Fatalf("step %d: kept %d bytes, but the spare and the new file share only %d", step, kept, commonPrefix(spareWant, want))
		}
		if kept > int64(len(want))/2 {
			keptHalf++
		}
		spareWant, prevFile = prevFile, got
	}
	if keptHalf < 40 {
		t.Errorf("%d of 400 writes kept more than half the file; the random changes should give over 40", keptHalf)
	}
	t.Logf("%d of 400 writes kept more than half the file", keptHalf)
}

// TestPreparedWriteDistrustsAChangedFile: a write keeps nothing of a spare that something else
// changed since this store wrote it (in place, at the same size, while it was the spare or
// while it was still the checkpoint, putting its modification time back, or by putting
// another file at its name), so the
// checkpoint it makes is whole and exactly EncodePrepared's.
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
				want, _ := EncodePrepared(p)
				got, err := os.ReadFile(s.Path())
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("write %d: the checkpoint differs from EncodePrepared's file at byte %d (kept %d)", write, commonPrefix(got, want), log.last(t))
				}
				switch kept := log.last(t); {
				case write == 4 && tc.before != 0 && kept != 0:
					t.Fatalf("write %d kept %d bytes of a changed file", write, kept)
				case write == 4 && tc.before == 0 && kept == 0:
					t.Fatalf("write %d kept nothing of the unchanged spare", write)
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

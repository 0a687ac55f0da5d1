package checkpoint

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// viaSpareLog records, for each write a store logs, whether it went through the spare (the
// "viaSpare" of the "Wrote checkpoint file" line).
type viaSpareLog struct {
	mu  sync.Mutex
	via []bool
}

var viaSpareLine = regexp.MustCompile(`"Wrote checkpoint file".*"viaSpare"=(true|false)`)

func (l *viaSpareLog) logger() logr.Logger {
	return funcr.New(func(_, args string) {
		if m := viaSpareLine.FindStringSubmatch(args); m != nil {
			l.mu.Lock()
			l.via = append(l.via, m[1] == "true")
			l.mu.Unlock()
		}
	}, funcr.Options{Verbosity: 4})
}

// count returns how many writes were logged, and how many of them went through the spare.
func (l *viaSpareLog) count() (writes, viaSpare int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.via {
		if v {
			viaSpare++
		}
	}
	return len(l.via), viaSpare
}

// TestPlainWritesMatchSpareWrites runs a store with PlainWrites and one without through the
// same random writes (Write, WritePrepared and WritePreparedNoDirSync of entries arriving,
// leaving and being replaced, of changing devices, of nil and empty lists) and checks after
// each that both checkpoints hold the same bytes, that the plain store never made, wrote or
// exchanged a spare, and that every write it made was a new temporary file.
func TestPlainWritesMatchSpareWrites(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	pool := &entryPool{rng: rng}
	var plainLog, spareLog viaSpareLog
	plainDir, spareDir := t.TempDir(), t.TempDir()
	plain := newTestStore(t, StoreConfig{Dir: plainDir, Logger: plainLog.logger(), PlainWrites: true})
	spare := newTestStore(t, StoreConfig{Dir: spareDir, Logger: spareLog.logger()})

	var entries []*Entry
	for range 20 {
		entries = append(entries, pool.entry())
	}
	reg := []*Registered{NewRegistered("example.com/gpu", []string{"gpu-0"})}
	const steps = 200
	for step := range steps {
		switch op := rng.IntN(10); {
		case op < 4:
			entries = append(slices.Clone(entries), pool.entry())
		case op < 5 && len(entries) > 0:
			entries = slices.Clone(entries)
			entries[rng.IntN(len(entries))] = pool.entry()
		case op < 7 && len(entries) > 0:
			i := rng.IntN(len(entries))
			entries = slices.Delete(slices.Clone(entries), i, i+1)
		case op < 8:
			reg = []*Registered{NewRegistered("example.com/gpu", []string{"gpu-" + strconv.Itoa(step)})}
		case op < 9:
			entries = nil
		}
		p := &Prepared{Entries: entries, Registered: reg}
		how := rng.IntN(3)
		for _, s := range []*Store{plain, spare} {
			var err error
			switch how {
			case 0:
				err = s.Write(p.Data())
			case 1:
				err = s.WritePrepared(p)
			default:
				err = s.WritePreparedNoDirSync(p)
			}
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
		got, err := os.ReadFile(plain.Path())
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(spare.Path())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("step %d (write %d): the plain store's checkpoint differs from the other's at byte %d of %d",
				step, how, commonPrefix(got, want), len(want))
		}
		if _, err := os.Lstat(filepath.Join(plainDir, SpareFileName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("step %d: the plain store's directory has a spare (%v)", step, err)
		}
		if tf := tempFiles(t, plainDir); len(tf) != 0 {
			t.Fatalf("step %d: the plain store left temporary files %v", step, tf)
		}
	}
	if writes, via := plainLog.count(); writes != steps || via != 0 {
		t.Errorf("the plain store logged %d writes, %d through the spare; want %d, none", writes, via, steps)
	}
	if _, via := spareLog.count(); runtime.GOOS == "linux" && via == 0 {
		t.Errorf("the default store never wrote through the spare: the comparison proved nothing")
	}
}

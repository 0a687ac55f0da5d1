package checkpoint

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The crash test re-executes the test binary as a writer that rewrites the
// checkpoint in a loop, and kills it with SIGKILL at a random moment.
const (
	crashWriterEnv = "KDM_CHECKPOINT_CRASH_WRITER"
	crashRunEnv    = "KDM_CHECKPOINT_CRASH_RUN"
	crashPlainEnv  = "KDM_CHECKPOINT_CRASH_PLAIN" // set: the writer's store has PlainWrites

	genResource  = "kdm.test/generation"
	podsResource = "kdm.test/pods"
	// genStride separates the generations of successive runs.
	genStride = 1_000_000
)

// crashData is generation gen: 100 to 1000 pods, so writes take measurable
// time, with the generation and pod count recorded in RegisteredDevices.
func crashData(gen int) *Data {
	pods := 100 + gen*379%901
	d := &Data{
		PodDeviceEntries: make([]PodDevicesEntry, pods),
		RegisteredDevices: map[string][]string{
			genResource:  {strconv.Itoa(gen)},
			podsResource: {strconv.Itoa(pods)},
		},
	}
	alloc := bytes.Repeat([]byte{10, 23, 69, 88, 65, 77}, 30)
	for i := range d.PodDeviceEntries {
		d.PodDeviceEntries[i] = PodDevicesEntry{
			PodUID:        fmt.Sprintf("11111111-2222-4333-8444-%012d", i),
			ContainerName: "app",
			ResourceName:  "example.com/gpu",
			DeviceIDs:     DevicesPerNUMA{0: {fmt.Sprintf("gpu-%d", 2*i)}, 1: {fmt.Sprintf("gpu-%d", 2*i+1)}},
			AllocResp:     alloc,
		}
	}
	return d
}

// crashPrepared is d as Prepared content whose i-th entry is (*pool)[i], made when first
// needed: successive generations share their first entries, so a write through the spare
// leaves those in place and writes the rest (see replaceViaSpare).
func crashPrepared(d *Data, pool *[]*Entry) *Prepared {
	p := &Prepared{}
	for i, e := range d.PodDeviceEntries {
		if i == len(*pool) {
			*pool = append(*pool, NewEntry(e))
		}
		p.Entries = append(p.Entries, (*pool)[i])
	}
	for _, res := range slices.Sorted(maps.Keys(d.RegisteredDevices)) {
		p.Registered = append(p.Registered, NewRegistered(res, d.RegisteredDevices[res]))
	}
	return p
}

// spareInFlight reports whether dir's spare shows a write the kill interrupted: it does not
// decode (killed while it was being filled), or holds a generation after gen, the
// checkpoint's (killed between its sync and the exchange). After a completed write the spare
// holds the generation before the checkpoint's.
func spareInFlight(dir string, gen int) bool {
	raw, err := os.ReadFile(filepath.Join(dir, SpareFileName))
	if err != nil {
		return false
	}
	d, _, err := Decode(raw)
	if err != nil {
		return true
	}
	spareGen, _ := strconv.Atoi(d.RegisteredDevices[genResource][0])
	return spareGen > gen
}

// runCrashWriter is the child process. It prints "ready" once its store is
// open and "wrote N" after each completed write (every fourth a Write, the others
// WritePrepared with entries kept between writes), and gives up on its own
// after a while in case nobody kills it.
func runCrashWriter(dir string) int {
	run, err := strconv.Atoi(os.Getenv(crashRunEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad", crashRunEnv, err)
		return 2
	}
	s, err := NewStore(StoreConfig{Dir: dir, PlainWrites: os.Getenv(crashPlainEnv) != ""})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("ready")
	deadline := time.Now().Add(20 * time.Second)
	var pool []*Entry // kept between writes, as the device manager keeps its entries
	for i := 0; time.Now().Before(deadline); i++ {
		d := crashData(run*genStride + i)
		if i%4 == 0 {
			err = s.Write(d)
		} else {
			err = s.WritePrepared(crashPrepared(d, &pool))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Println("wrote", i)
	}
	return 3
}

// crashRun starts one writer, kills it after delay from its "ready", and
// returns how many writes it reported as complete.
func crashRun(t *testing.T, exe, dir string, run int, plain bool, delay time.Duration) int {
	t.Helper()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), crashWriterEnv+"="+dir, crashRunEnv+"="+strconv.Itoa(run))
	if plain {
		cmd.Env = append(cmd.Env, crashPlainEnv+"=1")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	done := make(chan int)
	go func() {
		wrote := 0
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			switch line := sc.Text(); {
			case line == "ready":
				close(ready)
			case strings.HasPrefix(line, "wrote "):
				wrote++
			}
		}
		done <- wrote
	}()
	select {
	case <-ready:
		timer := time.NewTimer(delay) // the random kill moment, not a synchronisation
		<-timer.C
	case <-time.After(30 * time.Second):
		t.Error("writer did not start")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	wrote := <-done
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != -1 {
		t.Fatalf("run %d: writer ended with %v, want killed; stderr: %s", run, err, stderr.String())
	}
	return wrote
}

// TestCrashDuringWrite kills a writer 200 times at random moments while it
// rewrites the checkpoint, and checks after each kill that the file decodes
// and holds the last or the next generation (it may be missing only before
// the first write in its directory), and that the next NewStore removes any
// temporary file the killed writer left. It does so for the default writes and for
// PlainWrites, which must never leave a spare.
func TestCrashDuringWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary 200 times per mode; run by make test")
	}
	t.Run("spare", func(t *testing.T) { testCrashDuringWrite(t, false) })
	t.Run("plain", func(t *testing.T) { testCrashDuringWrite(t, true) })
}

func testCrashDuringWrite(t *testing.T, plain bool) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	root := t.TempDir()

	const runs, runsPerDir = 200, 25
	var (
		dir                     string
		lastGen                 int
		absent, leftTemp, wrote int
	)
	for run := 1; run <= runs; run++ {
		if run%runsPerDir == 1 {
			dir = filepath.Join(root, strconv.Itoa(run))
			lastGen = -1
		}
		delay := time.Duration(rng.Int64N(int64(30 * time.Millisecond)))
		n := crashRun(t, exe, dir, run, plain, delay)
		wrote += n

		raw, err := os.ReadFile(filepath.Join(dir, FileName))
		switch {
		case errors.Is(err, os.ErrNotExist):
			if lastGen >= 0 || n > 0 {
				t.Fatalf("run %d: checkpoint missing after a completed write", run)
			}
			absent++
		case err != nil:
			t.Fatal(err)
		default:
			d, _, err := Decode(raw)
			if err != nil {
				t.Fatalf("run %d (killed after %v): unreadable checkpoint: %v", run, delay, err)
			}
			gen, _ := strconv.Atoi(d.RegisteredDevices[genResource][0])
			pods, _ := strconv.Atoi(d.RegisteredDevices[podsResource][0])
			if pods != len(d.PodDeviceEntries) {
				t.Fatalf("run %d: %d entries, marker says %d", run, len(d.PodDeviceEntries), pods)
			}
			// After n reported writes the file holds write n-1, or write n
			// if the kill came between its rename and its report.
			first := run * genStride
			ok := gen == first+n || (n > 0 && gen == first+n-1) || (n == 0 && gen == lastGen)
			if !ok {
				t.Fatalf("run %d: generation %d after %d reported writes (previous %d)", run, gen, n, lastGen)
			}
			lastGen = gen
		}

		if _, err := os.Lstat(filepath.Join(dir, SpareFileName)); plain && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("run %d: a plain writer left a spare (%v)", run, err)
		}
		if len(tempFiles(t, dir)) > 0 || spareInFlight(dir, lastGen) {
			leftTemp++
		}
		if _, err := NewStore(StoreConfig{Dir: dir, PlainWrites: plain}); err != nil {
			t.Fatal(err)
		}
		if tf := tempFiles(t, dir); len(tf) != 0 {
			t.Fatalf("run %d: NewStore left temporary files %v", run, tf)
		}
	}
	t.Logf("%d runs: %d writes completed, %d kills left a temporary file, %d found no file yet",
		runs, wrote, leftTemp, absent)
	if wrote == 0 || leftTemp == 0 {
		t.Errorf("kills never landed in or after a write (wrote %d, left temp %d): the test proved nothing", wrote, leftTemp)
	}
}

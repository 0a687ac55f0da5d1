package upstreambench

import (
	"fmt"
	"os"
	"slices"
	"strings"
	_ "unsafe" // go:linkname

	"github.com/kdm-project/kdm/checkpoint"
)

// fastPathsOff is package checkpoint's switch of its hand-written fast paths (see
// internal/checkpoint/fastpaths.go), zero everywhere but in this binary when FastPathsEnv names paths
// to turn off, to measure what each one buys. go:linkname reaches the unexported variable;
// its type and bits are mirrored here, and TestFastPathSwitch checks the spare's.
//
//go:linkname fastPathsOff github.com/kdm-project/kdm/internal/checkpoint.fastPathsOff
var fastPathsOff uint32

// FastPathsEnv names the fast paths of package checkpoint this binary turns off, separated by
// commas: cmd/benchcompare -fastpaths sets it.
const FastPathsEnv = "UPSTREAMBENCH_FASTPATHS_OFF"

// fastPathBits are checkpoint's bits of fastPathsOff, by the names FastPathsEnv takes:
//   - spare: every write through a new temporary file, not the spare and a name exchange;
//   - delta: the spare rewritten whole, not from the first entry that differs;
//   - summed: a large file parsed, then hashed, not hashed while it is parsed, and no
//     checksum states nor text kept for the first write after a restart;
//   - whole: no entry's whole textSum and no run of them: an entry that follows a new
//     checksum state (an older pod left) is hashed again;
//   - latersync: the directory synced at once after a write through the spare that asked for
//     no directory sync (a health flip's), not on a goroutine the next write waits for.
var fastPathBits = map[string]uint32{"spare": 1 << 0, "delta": 1 << 1, "summed": 1 << 2, "whole": 1 << 3, "latersync": 1 << 4}

// FastPaths are the names fastPathBits knows, in the order the table lists them.
var FastPaths = []string{"spare", "delta", "summed", "whole", "latersync"}

// setFastPathsOff turns off the fast paths FastPathsEnv names; TestMain calls it before
// anything of package checkpoint runs.
func setFastPathsOff() error {
	v := os.Getenv(FastPathsEnv)
	if v == "" {
		return nil
	}
	for _, name := range strings.Split(v, ",") {
		bit, ok := fastPathBits[name]
		if !ok {
			return fmt.Errorf("%s=%q: %q is none of %v", FastPathsEnv, v, name, FastPaths)
		}
		fastPathsOff |= bit
	}
	return nil
}

// spareExists reports whether dir holds checkpoint's spare file.
func spareExists(dir string) bool {
	entries, _ := os.ReadDir(dir)
	return slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == checkpoint.SpareFileName })
}

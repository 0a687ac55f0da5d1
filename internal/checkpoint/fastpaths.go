package checkpoint

// fastPathsOff turns off, for a measurement, hand-written fast paths that have a plain
// equivalent producing the same bytes and results: each set bit makes the package take the
// plain way. It is zero (every fast path on) in every program but test/upstreambench's
// benchmark binary, which sets it through go:linkname before anything of this package runs,
// to measure what each path buys (docs/benchmarks.md, "What each fast path buys"). It is never
// changed while the package is in use.
var fastPathsOff uint32

// The bits of fastPathsOff. test/upstreambench mirrors these values.
const (
	// offSpare writes every checkpoint through a new temporary file, as on a file system
	// that cannot exchange names (replaceViaSpare declines).
	offSpare = 1 << iota
	// offDelta rewrites the whole spare instead of leaving in place the leading bytes it
	// already holds (sharedPrefix is 0).
	offDelta
	// offSummed parses a large file, then hashes it, instead of hashing its entries on a
	// second goroutine while it is parsed, and keeps no checksum states for the first write
	// after a restart.
	offSummed
	// offWhole builds no entry's whole textSum and composes no run (see text_sum.go): an
	// entry that follows a new state is hashed again.
	offWhole
	// offLaterSync syncs the directory at once after a write through the spare that asked for
	// no directory sync, instead of on a goroutine the next write waits for (syncDirLater).
	offLaterSync
)

// fastPath reports whether the fast path off is on.
func fastPath(off uint32) bool { return fastPathsOff&off == 0 }

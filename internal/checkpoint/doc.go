// Package checkpoint is the implementation of the public package
// github.com/kdm-project/kdm/checkpoint, which re-exports its format and its
// Store, and the device manager's write path, which stays here.
//
// It reads and writes the kubelet device manager's kubelet_internal_checkpoint
// file, byte-compatible with kubelet v1.36.0, and keeps it durable on disk. It
// knows nothing about plugins or pods: it maps between the file and Data. The
// contract of Data, Encode, Decode, Checksum, Store.Read, Store.Write and the
// errors is the public package's documentation.
//
// # The device manager's write path
//
// Entry, Registered, Prepared, EncodePrepared, Store.WritePrepared,
// Store.WritePreparedNoDirSync and Store.ReadEntries are the same format for a
// writer that keeps its content between writes, as the device manager does:
// each piece's JSON is made once and its part of the checksum reused.
// EncodePrepared produces the bytes Encode produces. Store.WritePrepared writes
// a slotted file instead: the same JSON with spaces between the entries, each
// entry in a slot that it keeps from write to write, so that a write changes
// only the slots of the entries that came or went and the checksum. The file
// decodes to the same Data, its entries in the order of their slots, and
// verifies, for kdm and for a kubelet. These live here, out of the public
// package, because only the device manager and its benchmarks
// (test/upstreambench, whose module may import this package) need them.
//
// The package name is part of the kubelet's checksummed text as go-spew
// prints it ("checkpoint.DevicesPerNUMA"): the tests' reflection oracle
// declares its types in this package, so it must stay named checkpoint.
package checkpoint

// Notes for maintainers: how the package is fast and what the store relies on. They are kept
// out of the package documentation, which states the contract.
//
// Format
//
// Encode produces exactly the bytes the kubelet's encoding/json writes for
// the same values, so a kubelet accepts kdm's files and kdm's golden tests
// compare byte for byte with files the real kubelet wrote
// (testdata/kubelet-1.36-checkpoints). nil and empty slices and maps are
// different values (null versus [] or {}; "<nil>" versus "[]" in the
// checksum), and Decode keeps the difference so that a decoded file verifies
// and re-encodes to the same bytes.
//
// Decode reads the file exactly as encoding/json does, like the kubelet, so
// it has the kubelet's quirks: keys match case-insensitively, unknown keys
// are ignored, a missing entry list or registered-device map reads as empty,
// and JSON errors read exactly like the kubelet's. Files in the plain shape
// that Encode and the kubelet write (exact keys, no escapes, canonical
// numbers) take a reflection-free parser, fuzzed against encoding/json, that
// makes Decode about three times as fast (for a large file the entries are
// hashed on a second goroutine while the rest is parsed); anything else goes
// through encoding/json itself. Decode also reads the pre-1.20 (V1) layout, with its
// different checksum, and converts it the way kubelets 1.20 to 1.29 did (all
// devices under NUMA node 0); kubelet 1.36 itself rejects V1 files.
//
// Checksum
//
// The kubelet's checksum is FNV-1a 32 over go-spew's "%#v" dump of its
// unexported checkpoint.checkpointData value, so Go package and type names
// are part of the hashed text. Rather than declaring look-alike types and
// running reflection, Checksum emits the grammar of that text (docs/behaviour.md#checkpoint-checksum)
// directly into the hash. Two observations make it fast: an FNV-1a step only
// XORs into the low byte, so hashing any constant piece of text is one
// multiply plus one lookup keyed by the incoming low byte; and most of the
// hashed text is the decimal dump of AllocResp bytes, which therefore costs
// one such step per byte. The tables are built once on first use and never
// change afterwards; they are the package's only package-level state. Tests
// prove the emitter identical to the real go-spew printer (the kubelet's
// way, run on a checkpointData type declared in the test package) by
// fuzzing, and to the kubelet's output on every golden file. Encode computes
// the checksum on a second goroutine for large data and joins it before it
// returns.
//
// A writer that keeps its entries between writes (the device manager) holds
// them as Entries and writes them as Prepared: each Entry's JSON is made once
// and its part of the checksum remembered (piece_sum.go). A piece of fixed
// text maps any incoming state h to p^len*h + add[h & 0xff] (h & 0x7f for
// ASCII text), and such maps compose. A piece remembers add for the low byte
// it was first hashed after; hashed after another one, an Entry gets its whole
// map (text_sum.go, about 32 passes' worth of work) and a Registered pair, whose
// text may be tens of MiB, fills a table of add eight low bytes per pass. So an
// entry that follows a new state (an older pod left) costs one lookup, and a
// large plugin's device list is hashed at most 16 times in its life, not at
// every admission. Store.ReadEntries returns a file's entries as such Entries,
// each keeping its text in the file (used once checked to be exactly Encode's)
// and the checksum states the reader's hash went through around it, so that the
// first write after a restart neither encodes nor hashes them again.
//
// Encode refuses strings that are not valid UTF-8 (ErrInvalidUTF8): the
// kubelet would write them as U+FFFD while hashing the original bytes,
// producing a file that never verifies.
//
// Durable store
//
// Store owns the file in one directory. Write goes through a temporary file
// in the same directory (a dot-file, so the kubelet's directory scans ignore
// it), fsyncs it, renames it over the checkpoint and, unlike the kubelet,
// also fsyncs the directory, so a crash leaves either the old or the new
// file. NewStore removes temporary files a killed writer left behind. The
// file mode is 0600; a missing directory is created 0755, the kubelet's
// mode, because it is the device-plugin socket directory that plugins must
// traverse.
//
// On Linux, once a checkpoint exists and unless StoreConfig.PlainWrites is
// set, a write does not make a new file: it overwrites the spare
// (SpareFileName, the file the previous write replaced), fdatasyncs it (its
// content and size; nothing after a crash reads its times), exchanges its name
// with the checkpoint's in one atomic step (renameat2 RENAME_EXCHANGE) and
// fsyncs the directory. Overwriting allocated blocks and swapping two names
// costs the disk a half to two thirds of what a new file costs, and nothing is
// freed. The directory sync follows every such write, even one that asked for
// none (WritePreparedNoDirSync), before it returns, because the next write
// overwrites the spare, which must by then not be the checkpoint on disk.
// (Earlier versions ran that sync on a goroutine and filled a second spare in
// turn; the device-list writes that it served gained less than a tenth.)
//
// Slotted writes (slots.go). The Store keeps the slots of the file it wrote
// last (slotModel) and, for the checkpoint and the spare, the slots it left
// in that file (slotImage) with the file's identity (inode, size, modification
// and change times, see fileID). A WritePrepared frees the slots of departed
// entries, puts each arriving entry in the first free slot it fits or in a new
// slot taken from the gap of spaces after the last slot, and, when the gap is
// used up, lays the file out anew (every entry in a slot with some room to
// spare, and a gap of a quarter of the entries' size: the whole file is
// written, once in many writes). The checksum, padded to ten digits, follows
// the slots in blocks of 64, each block keeping the state before it and its own
// map (composed from its entries' whole maps, or per low byte seen), so a
// change costs a walk over its block and one lookup per later block. Through a
// spare that is still, by its identity, the file the Store wrote there, of the
// same layout, only the slots that differ from that file's and the tail (the
// checksum, and the registered devices when they changed) are written; any
// other spare is written whole. The spare is overwritten only under an
// exclusive flock and only while it is still the file at its name; Read and
// ReadFile hold a shared flock on the file they read. Only a regular file of
// the Store's user with one name is written into (one with another mode than
// 0600 is replaced first), and a file system that cannot exchange names gets
// new files, written whole, as before.
//
// By default Read quarantines an unusable file (bad JSON, unknown layout,
// checksum mismatch): it renames it to
// "kubelet_internal_checkpoint.corrupt-<UTC time>" and returns a
// *QuarantineError, so the caller learns about it and the evidence is not
// silently overwritten by the next write. StoreConfig.OverwriteCorrupt
// restores the kubelet 1.36 behaviour (report only; the next Write replaces the file).
//

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
//
// How the package is fast, and what the store relies on, is docs/checkpoint-internals.md.
package checkpoint

// Package checkpoint reads and writes the kubelet device manager's
// kubelet_internal_checkpoint file, byte-compatible with kubelet v1.36.0, and
// keeps it durable on disk.
//
// The package knows nothing about plugins or pods: it maps between the file
// and Data (allocations per pod, container and resource, with device IDs per
// NUMA node and the plugin's raw AllocateResponse bytes, plus the healthy
// devices per resource). See docs/behaviour.md#checkpoint-format.
//
// # The kubelet's format
//
// Encode writes exactly the bytes the kubelet writes for the same Data, with
// the same Checksum; Decode reads what the kubelet reads, with its quirks and
// its error texts, and also the pre-1.20 (V1) layout, converted as kubelets
// 1.20 to 1.29 did. nil and empty lists are different values, kept through a
// decode so that a file verifies and re-encodes to the same bytes. Encode
// refuses strings that are not valid UTF-8 (ErrInvalidUTF8), which the
// kubelet would write as a file that never verifies.
//
// # The durable store
//
// Store owns the file in one directory. Write replaces it atomically and
// durably (the file and, unlike the kubelet, the directory are fsynced), so a
// crash leaves the old or the new file; Read decodes and verifies it, and by
// default moves an unusable file aside (see Store.Read) instead of letting the
// next write destroy the evidence. On Linux a write refills the file the write
// before replaced and exchanges the two names (SpareFileName);
// StoreConfig.PlainWrites makes every write a new file and a rename instead.
// The files are the same byte for byte either way. Write writes Encode's
// bytes; the device manager's own writes (internal) lay the same JSON out with
// spaces between the entries so that a write changes few bytes: such a file
// decodes to the same values and verifies, for kdm and for a kubelet.
//
// # Errors
//
// Callers branch with errors.Is on ErrNotFound and ErrCorrupt (which also
// matches ErrNotJSON, ErrUnknownLayout and *ChecksumError), and use
// errors.As for *FileError (the path), *ChecksumError (both sums) and
// *QuarantineError (where the file went). Texts reuse the kubelet's strings
// ("checkpoint is not found", "checkpoint is corrupted").
//
// # Where the code is
//
// The implementation is the module's internal/checkpoint package, which also
// holds the device manager's own write path: entries that keep their JSON text
// and their part of the checksum between writes, written through the same
// Store. The types here are aliases of its types, so values pass between the
// two without conversion.
package checkpoint

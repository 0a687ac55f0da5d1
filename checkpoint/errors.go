package checkpoint

import (
	impl "github.com/kdm-project/kdm/internal/checkpoint"
)

// The errors are the implementation's values, so errors.Is matches them
// whichever package a caller names.
var (
	// ErrNotFound is returned (wrapped in a *FileError) when the checkpoint
	// file does not exist. Its text is the kubelet's.
	ErrNotFound = impl.ErrNotFound

	// ErrCorrupt matches every error that means "the file exists but cannot
	// be used": not JSON, unknown layout, checksum mismatch. Its text is the
	// kubelet's. Callers branch on it with errors.Is.
	ErrCorrupt = impl.ErrCorrupt

	// ErrNotJSON is wrapped, together with the decoder's syntax error, when
	// the file is not valid JSON (an empty or truncated file included).
	// errors.Is(err, ErrCorrupt) is true for it.
	ErrNotJSON = impl.ErrNotJSON

	// ErrUnknownLayout is wrapped, together with the V2 decoder's error, when
	// the file is JSON but has neither the V2 nor the V1 shape.
	// errors.Is(err, ErrCorrupt) is true for it.
	ErrUnknownLayout = impl.ErrUnknownLayout

	// ErrInvalidUTF8 is returned by Encode and Store.Write when a string in
	// the data is not valid UTF-8. encoding/json (and so the kubelet) would
	// write U+FFFD in its place while the checksum covers the original bytes,
	// giving a file that can never be read back; kdm refuses to write it.
	ErrInvalidUTF8 = impl.ErrInvalidUTF8
)

// ChecksumError reports a checkpoint whose stored checksum (Stored) does not
// match the checksum computed over its decoded data (Computed) for the layout
// it was decoded with (Layout). errors.Is(err, ErrCorrupt) is true.
type ChecksumError = impl.ChecksumError

// FileError adds the checkpoint file's path (Path) to an error from Store or
// ReadFile (Err, which it unwraps to). Its text is
// "checkpoint file <path>: <reason>".
type FileError = impl.FileError

// QuarantineError is returned by Store.Read when the checkpoint (Path) was
// unusable and has been renamed aside (to QuarantinedAs), so that the next
// Write does not silently destroy the evidence. It unwraps to Err, the
// *FileError saying why the file was unusable: errors.Is(err, ErrCorrupt) is
// true, and errors.As finds the specific cause (for example *ChecksumError).
type QuarantineError = impl.QuarantineError

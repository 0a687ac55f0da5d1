package checkpoint

import (
	"errors"
	"fmt"
)

// ErrNotFound is returned (wrapped in a *FileError) when the checkpoint file
// does not exist. Its text is the kubelet's.
var ErrNotFound = errors.New("checkpoint is not found")

// ErrCorrupt matches every error that means "the file exists but cannot be
// used": not JSON, unknown layout, checksum mismatch. Its text is the
// kubelet's. Callers branch on it with errors.Is.
var ErrCorrupt = errors.New("checkpoint is corrupted")

// ErrNotJSON is wrapped, together with the decoder's syntax error, when the
// file is not valid JSON (an empty or truncated file included).
// errors.Is(err, ErrCorrupt) is true for it.
var ErrNotJSON = fmt.Errorf("%w: not valid JSON", ErrCorrupt)

// ErrUnknownLayout is wrapped, together with the V2 decoder's error, when the
// file is JSON but has neither the V2 nor the V1 shape.
// errors.Is(err, ErrCorrupt) is true for it.
var ErrUnknownLayout = fmt.Errorf("%w: neither the V2 nor the V1 layout", ErrCorrupt)

// ErrInvalidUTF8 is returned by Encode and Store.Write when a string in the
// data is not valid UTF-8. encoding/json (and so the kubelet) would write
// U+FFFD in its place while the checksum covers the original bytes, giving a
// file that can never be read back; kdm refuses to write it instead.
var ErrInvalidUTF8 = errors.New("checkpoint data contains a string that is not valid UTF-8")

// ChecksumError reports a checkpoint whose stored checksum does not match the
// checksum computed over its decoded data. errors.Is(err, ErrCorrupt) is true.
type ChecksumError struct {
	// Stored is the Checksum field as read from the file.
	Stored uint64
	// Computed is the checksum of the decoded data for Layout.
	Computed uint64
	// Layout is the layout the data was decoded with.
	Layout Layout
}

// Error names both sums and the layout, after the kubelet's own text.
func (e *ChecksumError) Error() string {
	return fmt.Sprintf("%v: checksum mismatch (%v layout): stored %d, computed %d",
		ErrCorrupt, e.Layout, e.Stored, e.Computed)
}

// Is reports whether target is ErrCorrupt.
func (e *ChecksumError) Is(target error) bool { return target == ErrCorrupt }

// FileError adds the checkpoint file's path to an error from Store.
type FileError struct {
	Path string
	Err  error
}

// Error returns "checkpoint file <path>: <reason>".
func (e *FileError) Error() string {
	return fmt.Sprintf("checkpoint file %q: %v", e.Path, e.Err)
}

// Unwrap returns the underlying error.
func (e *FileError) Unwrap() error { return e.Err }

// QuarantineError is returned by Store.Read when the checkpoint was unusable
// and has been renamed aside, so that the next Write does not silently
// destroy the evidence. errors.Is(err, ErrCorrupt) is true, and errors.As
// finds the *FileError and the specific cause (for example *ChecksumError).
type QuarantineError struct {
	// Path is the checkpoint path that was read.
	Path string
	// QuarantinedAs is the path the file now has.
	QuarantinedAs string
	// Err is the *FileError describing why the file was unusable.
	Err error
}

// Error names the reason and both paths.
func (e *QuarantineError) Error() string {
	return fmt.Sprintf("%v; the file was moved aside to %q", e.Err, e.QuarantinedAs)
}

// Unwrap returns Err.
func (e *QuarantineError) Unwrap() error { return e.Err }

package checkpoint

import (
	"errors"
	"fmt"
)

// The errors of the public package checkpoint, documented there.
var (
	ErrNotFound      = errors.New("checkpoint is not found")
	ErrCorrupt       = errors.New("checkpoint is corrupted")
	ErrNotJSON       = fmt.Errorf("%w: not valid JSON", ErrCorrupt)
	ErrUnknownLayout = fmt.Errorf("%w: neither the V2 nor the V1 layout", ErrCorrupt)
	ErrInvalidUTF8   = errors.New("checkpoint data contains a string that is not valid UTF-8")
)

// ChecksumError is checkpoint.ChecksumError.
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

// FileError is checkpoint.FileError.
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

// QuarantineError is checkpoint.QuarantineError.
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

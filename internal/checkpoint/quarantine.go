package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
)

const (
	// quarantineInfix separates the checkpoint name from the timestamp of a
	// quarantined file: kubelet_internal_checkpoint.corrupt-20261122T134501Z.
	quarantineInfix = ".corrupt-"
	// quarantineTimeFormat is a compact UTC timestamp, sortable as text.
	quarantineTimeFormat = "20060102T150405Z"
	// maxQuarantineAttempts bounds the "-N" suffixes tried when several
	// files are quarantined within one second.
	maxQuarantineAttempts = 1000
)

// quarantineFile renames the unusable checkpoint described by read (its
// FileInfo when it was opened) aside and returns the error for the caller.
// The caller holds s.mu.
func (s *Store) quarantineFile(read fs.FileInfo, cause *FileError) error {
	cur, err := os.Lstat(s.path)
	if err != nil || !os.SameFile(read, cur) {
		// Someone else replaced or removed the file since it was read; what
		// is there now is not what was found corrupt, so leave it alone.
		s.logger.Error(cause, "Checkpoint file was unusable and has since been replaced; not quarantining it", "path", s.path)
		return cause
	}
	target, err := s.freeQuarantineName()
	if err == nil {
		err = os.Rename(s.path, target)
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		s.logger.Error(err, "Failed to quarantine unusable checkpoint file", "path", s.path, "reason", cause.Err.Error())
		return &FileError{Path: s.path, Err: fmt.Errorf("%w; quarantining the file failed: %w", cause.Err, err)}
	}
	s.logger.Error(cause.Err, "Quarantined unusable checkpoint file", "path", s.path, "quarantinedAs", target)
	return &QuarantineError{Path: s.path, QuarantinedAs: target, Err: cause}
}

// freeQuarantineName returns a quarantine path that does not exist yet.
func (s *Store) freeQuarantineName() (string, error) {
	base := s.path + quarantineInfix + s.clock.Now().UTC().Format(quarantineTimeFormat)
	for i := 0; i < maxQuarantineAttempts; i++ {
		name := base
		if i > 0 {
			name = base + "-" + strconv.Itoa(i)
		}
		_, err := os.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return name, nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("no free quarantine name after %d attempts at %q", maxQuarantineAttempts, base)
}

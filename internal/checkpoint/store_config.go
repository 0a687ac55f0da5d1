package checkpoint

import (
	"errors"
	"fmt"
	"path/filepath"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// StoreConfig is checkpoint.StoreConfig, field for field.
type StoreConfig struct {
	// Dir is the directory that holds kubelet_internal_checkpoint (the
	// device-plugin socket directory). It must be an absolute path; NewStore
	// creates it with DirMode when it is missing.
	Dir string

	// Logger receives the store's events (quarantine, stale temporary file
	// removal, writes at V(4)). The zero Logger discards everything.
	Logger klog.Logger

	// OverwriteCorrupt turns quarantine off: Read only reports an unusable
	// file, and the next Write replaces it, as the kubelet 1.36 does. The
	// zero value, false, quarantines the file so that the evidence survives.
	OverwriteCorrupt bool

	// Clock timestamps quarantined files. Nil means clock.RealClock{}.
	Clock clock.PassiveClock

	// PlainWrites makes every write the plain one on every system: a new
	// temporary file, fsynced, renamed over the checkpoint, and the directory
	// fsynced (not for WritePreparedNoDirSync, which skips that last step).
	// The zero value, false, lets Linux writes reuse the spare (see
	// SpareFileName and Store.Write), which costs the disk less but relies on
	// exchanging names and on recognising a file by its identity. The files
	// written are the same byte for byte either way. With PlainWrites the
	// Store never opens, writes or exchanges a spare; one that an earlier
	// Store left is kept as it is until Remove.
	PlainWrites bool
}

// Validate is checkpoint.StoreConfig.Validate.
func (c StoreConfig) Validate() error {
	var errs []error
	switch {
	case c.Dir == "":
		errs = append(errs, errors.New("checkpoint store: Dir must be set"))
	case !filepath.IsAbs(c.Dir):
		errs = append(errs, fmt.Errorf("checkpoint store: Dir must be an absolute path, got %q", c.Dir))
	}
	return errors.Join(errs...)
}

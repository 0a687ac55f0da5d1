package checkpoint

import (
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	impl "github.com/kdm-project/kdm/internal/checkpoint"
)

const (
	// SpareFileName is the file in the checkpoint's directory that Linux
	// writes fill and then exchange with the checkpoint (see Store.Write):
	// after a write it holds the checkpoint that write replaced. Unlike the
	// other temporary files, NewStore keeps it for later writes.
	SpareFileName = impl.SpareFileName

	// SecondSpareFileName is a second spare that earlier versions filled in
	// turn with SpareFileName. No write fills it any more; NewStore removes one
	// left behind, as it does other temporary files, and Remove removes it.
	SecondSpareFileName = impl.SecondSpareFileName

	// DirMode is the mode NewStore creates a missing directory with. It is
	// the kubelet's: the directory is the device-plugin socket directory,
	// which plugin processes must be able to traverse to reach kubelet.sock.
	// The checkpoint file itself is always 0600.
	DirMode = impl.DirMode
)

// StoreConfig describes a [Store]. Only Dir must be set: every other field's
// zero value is the documented default, and NewStore never changes a value
// that is set.
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
	// fsynced. The zero value, false, lets Linux writes reuse the spare (see
	// SpareFileName and Store.Write), which costs the disk less but relies on
	// exchanging names and on recognising a file by its identity. The files
	// written are the same byte for byte either way. With PlainWrites the
	// Store never opens, writes or exchanges a spare; those an earlier
	// Store left are kept as they are until Remove.
	PlainWrites bool
}

// Validate reports every value of c that NewStore would refuse, joined with
// errors.Join in field order. It changes nothing.
func (c StoreConfig) Validate() error { return impl.StoreConfig(c).Validate() }

// Store keeps the checkpoint file of one directory durable.
//
// All methods are safe for concurrent use; they are serialised by one mutex,
// so a Read never observes, nor quarantines, a file another method of the
// same Store is replacing. Another process writing the same file (a kubelet)
// is not coordinated with; every replacement is an atomic rename or exchange
// of names, so the checkpoint's name always leads to a whole file. On Linux a
// write reuses the file the previous write replaced under an exclusive flock,
// unless StoreConfig.PlainWrites is set; Read and ReadFile hold a shared flock
// while they read, so they never see a file change under them.
type Store struct {
	s *impl.Store
}

// NewStore returns the Store for cfg.Dir/kubelet_internal_checkpoint. It
// creates the directory with DirMode if it is missing, and removes temporary
// files that a writer killed mid-write left behind (only names starting with
// ".kubelet_internal_checkpoint.tmp-", but for SpareFileName; the kubelet's
// own temp files are not touched). It fails with cfg.Validate's error if cfg
// is invalid, or if the directory cannot be created, listed or cleaned.
func NewStore(cfg StoreConfig) (*Store, error) {
	s, err := impl.NewStore(impl.StoreConfig(cfg))
	if err != nil {
		return nil, err
	}
	return &Store{s: s}, nil
}

// Path returns the checkpoint file's path.
func (s *Store) Path() string { return s.s.Path() }

// Write replaces the checkpoint with Encode(d), durably: the new file is
// written beside it (mode 0600, name starting with a dot), fsynced, put in
// the checkpoint's place by an atomic rename (on Linux, once a checkpoint
// exists, by exchanging names with the spare it refilled), and the directory
// is fsynced. After a crash at any point the file is either the old or the new
// checkpoint. On failure the old checkpoint is left as it was, except when
// only the final directory fsync failed (the new file is in place, but its
// durability is unknown). Errors are *FileError; ErrInvalidUTF8 is reported
// before touching disk.
func (s *Store) Write(d *Data) error { return s.s.Write(d) }

// Read reads, decodes and verifies the checkpoint (see Decode).
//
// A missing file gives a *FileError matching ErrNotFound. Any other failure
// is a *FileError naming the path and the reason. When the file exists but
// is unusable (errors.Is(err, ErrCorrupt)) and quarantine is on, the file is
// renamed aside to "kubelet_internal_checkpoint.corrupt-<UTC time>" (with a
// "-N" suffix if that name is taken), the directory is fsynced, and a
// *QuarantineError wrapping the *FileError is returned, so the caller can
// report it and the evidence survives the next Write. If that rename fails,
// the *FileError says so and the file stays where it was.
func (s *Store) Read() (*Data, Layout, error) { return s.s.Read() }

// Remove deletes the checkpoint file, and the spare holding the checkpoint
// before it, and fsyncs the directory. A missing file is not an error.
// Errors are *FileError.
func (s *Store) Remove() error { return s.s.Remove() }

// Close returns nil: every write is over, directory sync included, when it
// returns. The Store stays usable.
func (s *Store) Close() error { return s.s.Close() }

package checkpoint

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kdm-project/kdm/internal/hostfile"
)

const (
	// tempPrefix starts the name of every temporary file Write creates. The
	// leading dot matters: the kubelet's ShouldResetExtendedResourceCapacity
	// and plugin-socket cleanup ignore dot-files in the socket directory.
	tempPrefix = "." + FileName + ".tmp-"

	// DirMode is the mode NewStore creates a missing directory with. It is
	// the kubelet's: the directory is the device-plugin socket directory,
	// which plugin processes must be able to traverse to reach kubelet.sock.
	// The checkpoint file itself is always 0600.
	DirMode os.FileMode = 0o755
)

// Store keeps the checkpoint file of one directory durable.
//
// All methods are safe for concurrent use; they are serialised by one mutex,
// so a Read never observes, nor quarantines, a file another method of the
// same Store is replacing. Another process writing the same file (a kubelet)
// is not coordinated with; every replacement is an atomic rename, so a reader
// sees either the old or the new file.
type Store struct {
	dir        string
	path       string
	logger     klog.Logger
	quarantine bool
	clock      clock.PassiveClock

	mu sync.Mutex
	bw *bufio.Writer // WritePrepared's write buffer, kept for the next one
	// closed is set by Close, after which replaced files are released inline. Guarded by mu.
	closed bool
	// lastSize is the size of the file the last write left, or -1 if unknown; a write takes a
	// reference to the file it replaces only when that file is large (see holdFile). Guarded
	// by mu.
	lastSize int64

	// releases tracks the goroutines releasing replaced files (see releaseReplaced).
	releases sync.WaitGroup
}

// asyncReleaseSize is the size from which the file a write replaces is released on a
// goroutine. Dropping the last reference to a file frees its blocks, which for a checkpoint of
// 10,000 pods (7 MB on ext4) takes longer than a millisecond; nothing needs to wait for it.
const asyncReleaseSize = 1 << 20

// writeBufferSize is the size of the buffer WritePrepared writes the file through.
const writeBufferSize = 256 << 10

// NewStore returns the Store for cfg.Dir/kubelet_internal_checkpoint. It
// creates the directory with DirMode if it is missing, and removes temporary
// files that a writer killed mid-write left behind (only names starting with
// ".kubelet_internal_checkpoint.tmp-"; the kubelet's own temp files are not
// touched). It fails with cfg.Validate's error if cfg is invalid, or if the
// directory cannot be created, listed or cleaned.
func NewStore(cfg StoreConfig) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		dir:        filepath.Clean(cfg.Dir),
		logger:     cfg.Logger, // the zero logr.Logger discards everything
		quarantine: !cfg.OverwriteCorrupt,
		clock:      cfg.Clock,
		lastSize:   -1,
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	s.path = filepath.Join(s.dir, FileName)
	if err := os.MkdirAll(s.dir, DirMode); err != nil {
		return nil, fmt.Errorf("checkpoint store: create directory: %w", err)
	}
	if err := s.removeStaleTemps(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) removeStaleTemps() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("checkpoint store: list directory: %w", err)
	}
	removed := false
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tempPrefix) || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(s.dir, e.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("checkpoint store: remove stale temporary file: %w", err)
		}
		removed = true
		s.logger.V(2).Info("Removed stale checkpoint temporary file", "path", p)
	}
	if removed {
		return syncDir(s.dir)
	}
	return nil
}

// Path returns the checkpoint file's path.
func (s *Store) Path() string { return s.path }

// Write replaces the checkpoint with Encode(d), durably: it writes a
// temporary file in the same directory (mode 0600, name starting with a dot),
// fsyncs it, closes it, renames it over the checkpoint and fsyncs the
// directory. After a crash at any point the file is either the old or the
// new checkpoint. On failure the temporary file is removed and the old
// checkpoint is left as it was, except when only the final directory fsync
// failed (the new file is in place, but its durability is unknown).
// Errors are *FileError; ErrInvalidUTF8 is reported before touching disk.
func (s *Store) Write(d *Data) error {
	b, err := Encode(d)
	if err != nil {
		return &FileError{Path: s.path, Err: err}
	}
	entries := 0
	if d != nil {
		entries = len(d.PodDeviceEntries)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked(b, entries)
}

// WritePrepared is Write for Prepared content: the same file as
// Write(p.Data()), with each entry's JSON taken from its cache. The file is
// written piece by piece through a buffer the Store keeps, while the
// checksum, which ends the file, is computed on a second goroutine: a large
// checkpoint is neither built in memory whole nor hashed before its writing
// starts.
func (s *Store) WritePrepared(p *Prepared) error { return s.writePrepared(p, true) }

// WritePreparedNoDirSync is WritePrepared without the final directory fsync,
// for a change that a crash may undo. The file is replaced as atomically as
// ever (written, fsynced and renamed, so a crash never leaves a partial
// file), but until the directory is next synced, by any later Write or
// WritePrepared, a crash may bring back the checkpoint this one replaced.
func (s *Store) WritePreparedNoDirSync(p *Prepared) error { return s.writePrepared(p, false) }

func (s *Store) writePrepared(p *Prepared, dirSync bool) error {
	if p == nil {
		p = &Prepared{} // written as the zero Data, as Write(nil) writes it
	}
	reg, _, err := planPrepared(p)
	if err != nil {
		return &FileError{Path: s.path, Err: err}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	size := 0
	err = s.replaceLocked(len(p.Entries), dirSync, func(f io.Writer) error {
		if s.bw == nil {
			s.bw = bufio.NewWriterSize(f, writeBufferSize)
		}
		s.bw.Reset(f)
		var werr error
		sum := emitPrepared(p, reg, func(b []byte) {
			if werr == nil {
				_, werr = s.bw.Write(b)
				size += len(b)
			}
		})
		if werr != nil {
			return werr
		}
		var tail [32]byte
		t := appendChecksumTail(tail[:0], sum)
		size += len(t)
		if _, err := s.bw.Write(t); err != nil {
			return err
		}
		return s.bw.Flush()
	})
	if s.bw != nil {
		s.bw.Reset(nil) // let go of the file
	}
	if err != nil {
		return err
	}
	s.logWrite(size, len(p.Entries), dirSync)
	return nil
}

// writeLocked replaces the checkpoint with b, the encoding of entries entries, durably.
// Callers hold mu.
func (s *Store) writeLocked(b []byte, entries int) error {
	if err := s.replaceLocked(entries, true, func(f io.Writer) error { _, err := f.Write(b); return err }); err != nil {
		return err
	}
	s.logWrite(len(b), entries, true)
	return nil
}

// replaceLocked replaces the checkpoint with what write writes, the encoding of entries
// entries, and fsyncs the directory when dirSync is set. Callers hold mu.
func (s *Store) replaceLocked(entries int, dirSync bool, write func(io.Writer) error) error {
	var replaced *heldFile
	if s.lastSize < 0 || s.lastSize >= asyncReleaseSize {
		replaced = holdFile(s.path)
	}
	size, err := writeFileAtomic(s.dir, s.path, write, dirSync)
	s.releaseReplaced(replaced)
	s.lastSize = size
	if err != nil {
		s.lastSize = -1
		return &FileError{Path: s.path, Err: err}
	}
	return nil
}

// Close waits until the files that writes replaced are released (see asyncReleaseSize). The
// Store stays usable; later writes release what they replace before returning. The device
// manager calls it when it stops, so that no goroutine of its store outlives it.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.releases.Wait()
	return nil
}

// releaseReplaced drops the reference holdFile took: on a goroutine for a file of
// asyncReleaseSize or more, unless the Store is closed. Callers hold mu.
func (s *Store) releaseReplaced(h *heldFile) {
	if h == nil {
		return
	}
	if h.size < asyncReleaseSize || s.closed {
		h.release()
		return
	}
	s.releases.Add(1)
	go func() {
		defer s.releases.Done()
		h.release()
	}()
}

func (s *Store) logWrite(bytes, entries int, dirSync bool) {
	s.logger.V(4).Info("Wrote checkpoint file", "path", s.path, "bytes", bytes, "entries", entries, "dirSynced", dirSync)
}

// writeFileAtomic replaces path with what write writes through a temporary file in dir:
// write, fsync, close, rename, and, with dirSync, fsync dir so that the rename is durable.
// It returns the number of bytes written.
func writeFileAtomic(dir, path string, write func(io.Writer) error, dirSync bool) (size int64, err error) {
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return 0, fmt.Errorf("create temporary file: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	cw := &countingWriter{w: f}
	if err = write(cw); err != nil {
		return 0, fmt.Errorf("write temporary file: %w", err)
	}
	if err = f.Sync(); err != nil {
		return 0, fmt.Errorf("sync temporary file: %w", err)
	}
	if err = f.Close(); err != nil {
		return 0, fmt.Errorf("close temporary file: %w", err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return 0, fmt.Errorf("rename temporary file: %w", err)
	}
	if !dirSync {
		return cw.n, nil
	}
	if err := syncDir(dir); err != nil {
		return 0, err // the rename happened: keep the new file
	}
	return cw.n, nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// syncDir fsyncs a directory so that renames and removals in it are durable. Tests replace it
// to count the syncs.
var syncDir = fsyncDir

func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory for sync: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

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
func (s *Store) Read() (*Data, Layout, error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	// A FIFO or a device planted at the path neither hangs nor fools the reader: it is
	// refused, and is neither quarantined nor replaced.
	b, fi, err := hostfile.Read(s.path, 0, true)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, LayoutV2, &FileError{Path: s.path, Err: ErrNotFound}
	}
	if err != nil {
		return nil, LayoutV2, &FileError{Path: s.path, Err: fmt.Errorf("read: %w", err)}
	}

	d, layout, err := Decode(b)
	if err == nil {
		return d, layout, nil
	}
	ferr := &FileError{Path: s.path, Err: err}
	if !s.quarantine || !errors.Is(err, ErrCorrupt) {
		return nil, layout, ferr
	}
	return nil, layout, s.quarantineFile(fi, ferr)
}

// Remove deletes the checkpoint file and fsyncs the directory. A missing
// file is not an error. Errors are *FileError.
func (s *Store) Remove() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := os.Remove(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		return &FileError{Path: s.path, Err: err}
	}
	return nil
}

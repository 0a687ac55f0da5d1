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
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kdm-project/kdm/internal/hostfile"
)

const (
	// tempPrefix starts the name of every temporary file Write creates. The
	// leading dot matters: the kubelet's ShouldResetExtendedResourceCapacity
	// and plugin-socket cleanup ignore dot-files in the socket directory.
	tempPrefix = "." + FileName + ".tmp-"

	// SpareFileName is the file in the checkpoint's directory that Linux writes fill and then
	// exchange with the checkpoint (see Write): after a write it holds the checkpoint that
	// write replaced. Unlike the other temporary files, NewStore keeps it for later writes.
	SpareFileName = tempPrefix + "spare"

	// SecondSpareFileName is a second spare that earlier versions filled in turn with
	// SpareFileName. No write fills it any more; NewStore removes one left behind, as it does
	// other temporary files, and Remove removes it too.
	SecondSpareFileName = tempPrefix + "spare2"

	// DirMode is the mode NewStore creates a missing directory with. It is
	// the kubelet's: the directory is the device-plugin socket directory,
	// which plugin processes must be able to traverse to reach kubelet.sock.
	// The checkpoint file itself is always 0600.
	DirMode os.FileMode = 0o755
)

// Store is checkpoint.Store; its contract is documented there. All methods hold mu,
// so a Read never observes, nor quarantines, a file another method is replacing.
type Store struct {
	dir        string
	path       string
	spare      string // SpareFileName's path
	logger     klog.Logger
	quarantine bool
	plain      bool // StoreConfig.PlainWrites: never through the spare
	clock      clock.PassiveClock

	mu sync.Mutex
	// noExchange is set once the file system refused to exchange names; spareSafe is cleared
	// while the spare may still be the checkpoint on disk (the directory sync after an
	// exchange failed, or NewStore found a spare), until a later directory sync succeeds.
	// Either keeps writes off the spare. Guarded by mu.
	noExchange bool
	spareSafe  bool
	// checkpointHolds and spareHolds are what the Store knows the files at the checkpoint's
	// and at each spare's name hold, from its own Prepared writes; nil when it does not know.
	// A write through a spare leaves in place what the spare already holds of the new file
	// (see replaceViaSpare). Guarded by mu.
	checkpointHolds *fileContent
	spareHolds      *fileContent
	// model is the slotted file the next WritePrepared starts from (see slots.go). Guarded
	// by mu.
	model slotModel
}

// writeBufferSize is the size of the buffer WritePrepared writes the file through.
const writeBufferSize = 256 << 10

// writeBuffers holds the write buffers of WritePrepared, shared by every Store: one is taken
// for a write and given back after it, so that a Store keeps no buffer between writes and a
// Store made for a new manager (a restart) does not allocate one of its own.
var writeBuffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufferSize) }}

// NewStore is checkpoint.NewStore. A spare found in the directory is not written into
// before the first write that syncs the directory.
func NewStore(cfg StoreConfig) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		dir:        filepath.Clean(cfg.Dir),
		logger:     cfg.Logger, // the zero logr.Logger discards everything
		quarantine: !cfg.OverwriteCorrupt,
		plain:      cfg.PlainWrites,
		clock:      cfg.Clock,
		spareSafe:  true,
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	s.path = filepath.Join(s.dir, FileName)
	s.spare = filepath.Join(s.dir, SpareFileName)
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
		if e.Name() == SpareFileName {
			// Kept: removing it would free its blocks and sync the directory on the way to
			// reading the checkpoint. A previous Store may have exchanged it just before it
			// stopped, so until a directory sync it may still be the checkpoint on disk.
			s.spareSafe = false
			continue
		}
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

// Write is checkpoint.Store.Write.
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
	return s.writeLocked(b, entries, true)
}

// WritePrepared writes p durably, as Write does, in the slotted layout (see slots.go): the
// file decodes to p.Data() with its entries in the order of their slots, which is the order of
// p's entries up to the places of departed entries taken by new ones, and verifies. Through
// the spare (see Write) only the bytes that differ from what the spare holds are written,
// when the Store knows what it holds (the file it wrote two writes before, unchanged since,
// see fileID).
// It is part of the device manager's write path (see the package documentation).
func (s *Store) WritePrepared(p *Prepared) error { return s.writePrepared(p, true) }

// WritePreparedNoDirSync is WritePrepared without the final directory fsync,
// for a change that a crash may undo. The file is replaced as atomically as
// ever (written, fsynced and renamed, so a crash never leaves a partial
// file), but until the directory is next synced, by any later Write or
// WritePrepared, a crash may bring back the checkpoint this one replaced.
// A write that reuses the spare (see Write) syncs the directory all the same,
// since the next write overwrites that spare, which must by then not be the
// checkpoint on disk: only a plain write (a new temporary file) skips it.
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
	if p.Entries == nil { // null has no slots
		s.model = slotModel{}
		b, _ := EncodePrepared(p)
		return s.writeLocked(b, 0, dirSync)
	}
	im, h := s.model.update(p, reg)
	how, err := s.replaceLocked(dirSync, im, func(f *os.File, prev *slotImage) error {
		// The checksum's digits are written last, so a large list of registered devices is
		// hashed while the file is written.
		sum := make(chan uint32, 1)
		tail := func() { sum <- checksumTail(h, im.regNil, reg) }
		if im.size-im.lay.tailOff() >= 1<<20 {
			go tail()
		} else {
			tail()
		}
		var err error
		if prev != nil && prev.lay == im.lay {
			err = patchImage(f, prev, im)
		} else {
			err = writeImage(f, im)
		}
		if h := <-sum; err == nil {
			err = writeSum(f, im, h)
		}
		return err
	})
	im.reg = nil // written: the Store remembers the pairs by their serials
	if err != nil {
		return err
	}
	s.logWrite(int(im.size), len(p.Entries), how)
	return nil
}

// writeLocked replaces the checkpoint with b, the encoding of entries entries, durably.
// Callers hold mu.
func (s *Store) writeLocked(b []byte, entries int, dirSync bool) error {
	how, err := s.replaceLocked(dirSync, nil, func(f *os.File, _ *slotImage) error {
		_, err := (&countingWriter{w: f, f: f}).Write(b)
		return err
	})
	if err != nil {
		return err
	}
	s.logWrite(len(b), entries, how)
	return nil
}

// writeFunc writes a checkpoint file into f, a new file or the spare, open at its start. prev
// is what f holds when the Store knows it (a slotted file it wrote), or nil. The caller
// truncates f to the new file's size.
type writeFunc func(f *os.File, prev *slotImage) error

// replacement says how a write replaced the checkpoint.
type replacement struct {
	viaSpare bool // through the spare (replaceViaSpare), not a new temporary file
	dirSync  bool // the directory was synced after it
	patched  bool // only the bytes that differ from what the spare held were written
}

// fileContent is what a Store knows a file it wrote holds: its slotted image, and the file's
// identity as the Store last saw it. A later write checks the identity before it trusts the
// image (see replaceViaSpare).
type fileContent struct {
	img *slotImage
	id  fileID
}

// fileID is what a Store compares to decide that a file is still the one it wrote: the same
// inode, size, modification time and, once set, change time. Writing into the file, truncating
// it, putting another file at its name or changing its times, mode or owner changes one of
// them, as long as the file system's timestamps tell the change from the Store's own last
// look at the file: since Linux 6.13 (multigrain timestamps on ext4, xfs, btrfs and tmpfs) a
// change after the Store read the times always does. On older kernels a change that keeps the
// size, made within one clock tick of the Store's write, is not seen; only a process writing
// in place into one of the Store's own 0600 files can make one, and the checkpoint it leads to
// fails its checksum when read.
type fileID struct {
	dev, ino         uint64
	size             int64
	mtimeNs, ctimeNs int64
	ctimeKnown       bool
}

// replaceLocked replaces the checkpoint with what write writes, through the spare when it can
// (replaceViaSpare) and plain writes are not asked for, and a new temporary file otherwise,
// and fsyncs the directory when dirSync is set (a write through the spare always does). im is
// the new file's image when it is slotted, nil otherwise. Callers hold mu.
func (s *Store) replaceLocked(dirSync bool, im *slotImage, write writeFunc) (replacement, error) {
	if !s.plain {
		patched, done, err := s.replaceViaSpare(write, im)
		if done {
			if err != nil {
				return replacement{}, &FileError{Path: s.path, Err: err}
			}
			return replacement{viaSpare: true, dirSync: true, patched: patched}, nil
		}
	}
	s.checkpointHolds, s.spareHolds = nil, nil
	if err := writeFileAtomic(s.dir, s.path, func(f *os.File) error { return write(f, nil) }, dirSync); err != nil {
		return replacement{}, &FileError{Path: s.path, Err: err}
	}
	if dirSync {
		s.spareSafe = true // the directory is on disk as it is now
	}
	return replacement{dirSync: dirSync}, nil
}

// Close releases nothing and returns nil: every write is over, directory sync included,
// when it returns. It is kept so that a caller that closes its Store keeps working.
func (s *Store) Close() error { return nil }

func (s *Store) logWrite(bytes, entries int, how replacement) {
	s.logger.V(4).Info("Wrote checkpoint file", "path", s.path, "bytes", bytes, "entries", entries,
		"dirSynced", how.dirSync, "viaSpare", how.viaSpare, "patched", how.patched)
}

// writeFileAtomic replaces path with what write writes into a temporary file in dir: write,
// fsync, close, rename, and, with dirSync, fsync dir so that the rename is durable.
func writeFileAtomic(dir, path string, write func(*os.File) error, dirSync bool) (err error) {
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return fmt.Errorf("create temporary file: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = write(f); err != nil {
		return fmt.Errorf("write temporary file: %w", err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("sync temporary file: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("close temporary file: %w", err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename temporary file: %w", err)
	}
	if dirSync {
		return syncDir(dir) // on failure the rename happened: keep the new file
	}
	return nil
}

// countingWriter counts the bytes written through it. With f set, it asks the kernel to
// start writing each writebackChunk of what it wrote back to disk (startWriteback), so that
// the fsync that ends a large write finds most of the file already written: the disk works
// while the rest of the file and its checksum are made. base is f's offset of the first byte.
type countingWriter struct {
	w    io.Writer
	n    int64
	f    *os.File
	base int64
	// started counts the bytes whose writeback was started.
	started int64
}

// writebackChunk is how many bytes countingWriter lets gather before it starts their
// writeback. Smaller checkpoints, most of them, are left to the fsync alone.
const writebackChunk = 1 << 20

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if c.f != nil && c.n-c.started >= writebackChunk {
		startWriteback(c.f, c.base+c.started, c.n-c.started)
		c.started = c.n
	}
	return n, err
}

// syncDir fsyncs a directory so that renames and removals in it are durable. Tests replace it
// to count the syncs.
var syncDir = fsyncDir

// Read is checkpoint.Store.Read.
func (s *Store) Read() (*Data, Layout, error) {
	d, _, layout, err := s.read(false)
	return d, layout, err
}

// ReadEntries is Read that also returns the file's entries as Entries, entries[i] holding
// data.PodDeviceEntries[i] and sharing its lists and bytes, for a caller that keeps them and
// writes them again (as Prepared): each Entry then makes its JSON and its part of the checksum
// once, at the first write. Neither data nor the entries may be modified. It is part of the
// device manager's write path (see the package documentation).
func (s *Store) ReadEntries() (data *Data, entries []*Entry, layout Layout, err error) {
	return s.read(true)
}

// read is Read, and ReadEntries when entries is set.
func (s *Store) read(entries bool) (*Data, []*Entry, Layout, error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	// A FIFO or a device planted at the path neither hangs nor fools the reader: it is
	// refused, and is neither quarantined nor replaced.
	b, fi, err := s.readLocked()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, LayoutV2, &FileError{Path: s.path, Err: ErrNotFound}
	}
	if err != nil {
		return nil, nil, LayoutV2, &FileError{Path: s.path, Err: fmt.Errorf("read: %w", err)}
	}

	var (
		d      *Data
		es     []*Entry
		layout Layout
	)
	if entries {
		d, es, layout, err = decodeEntries(b) // b is ours to give to the entries
	} else {
		d, layout, err = Decode(b)
	}
	if err == nil {
		return d, es, layout, nil
	}
	ferr := &FileError{Path: s.path, Err: err}
	if !s.quarantine || !errors.Is(err, ErrCorrupt) {
		return nil, nil, layout, ferr
	}
	return nil, nil, layout, s.quarantineFile(fi, ferr)
}

// readLocked reads the checkpoint (see readFileLocked). Callers hold mu.
func (s *Store) readLocked() ([]byte, fs.FileInfo, error) { return readFileLocked(s.path) }

// ReadFile is checkpoint.ReadFile.
func ReadFile(path string) ([]byte, error) {
	b, _, err := readFileLocked(path)
	if err != nil {
		return nil, &FileError{Path: path, Err: fmt.Errorf("read: %w", err)}
	}
	return b, nil
}

// readFileLocked reads the file at path under a shared flock (see lockForRead). A file that a
// Store is overwriting, or has just moved, is read again from the path: up to
// readBusyAttempts times, a millisecond apart, then without the lock, as any reader would.
func readFileLocked(path string) ([]byte, fs.FileInfo, error) {
	for range readBusyAttempts {
		b, fi, err := hostfile.ReadChecked(path, 0, true, lockForRead(path))
		if !errors.Is(err, errReadBusy) {
			return b, fi, err
		}
		time.Sleep(time.Millisecond)
	}
	return hostfile.Read(path, 0, true)
}

// readBusyAttempts bounds how long Read waits for another Store's write (see readLocked).
const readBusyAttempts = 100

// errReadBusy is lockForRead's report that the file it was given is being overwritten.
var errReadBusy = errors.New("checkpoint file is being replaced")

// Remove deletes the checkpoint file, and the spares holding the checkpoints
// before it, and fsyncs the directory. A missing file is not an error. Errors
// are *FileError.
func (s *Store) Remove() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkpointHolds, s.spareHolds = nil, nil
	removedSpare := false
	for _, spare := range []string{s.spare, filepath.Join(s.dir, SecondSpareFileName)} {
		removedSpare = os.Remove(spare) == nil || removedSpare
	}
	err := os.Remove(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		if !removedSpare {
			return nil
		}
		err = nil
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		return &FileError{Path: s.path, Err: err}
	}
	return nil
}

// sizeOr returns the size of the file of im, or, for a file that is not slotted (nil im),
// f's offset after it was written from its start.
func (im *slotImage) sizeOr(f *os.File) int64 {
	if im != nil {
		return im.size
	}
	off, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return -1
	}
	return off
}

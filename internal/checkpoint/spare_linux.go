package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// exchangeFiles swaps the names a and b in one atomic step (renameat2 with
// RENAME_EXCHANGE). Tests replace it.
var exchangeFiles = func(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}

// replaceViaSpare replaces the checkpoint with what write writes by overwriting the spare
// (SpareFileName) and swapping it with the checkpoint, and reports whether it did the write
// (done). It declines, leaving everything as it was, when the spare cannot be used
// safely: the checkpoint is not a regular file, the spare is not a regular file of ours with
// one name, another writer holds it, the last directory sync failed, or the file system cannot
// exchange names. The caller then writes a fresh temporary file instead.
//
// Overwriting a file whose blocks are already allocated, then exchanging two names, costs the
// disk less than creating, filling and renaming a new file and freeing the replaced one
// (a half to two thirds of it, for a small checkpoint on ext4). It is as safe, given three rules:
//   - the spare is synced before the exchange, so the name that becomes the checkpoint's
//     always holds a whole file;
//   - the directory is synced after every exchange, whatever the caller asked for: the next
//     write overwrites the spare, which until that sync might still be the checkpoint on disk;
//   - the spare is overwritten only under an exclusive flock, and only while it is still the
//     file at the spare's name, so two writers never fill the same file, and a reader holding
//     a shared lock (Read) never sees the file change under it.
//
// im is the new file's image when it is slotted (nil otherwise). When the spare is still the
// file this Store wrote two writes ago, unchanged since (see fileID), and both are
// slotted files of the same layout, write is given what the spare holds, and only the bytes
// that differ are written (patched).
//
// Callers hold mu.
func (s *Store) replaceViaSpare(write writeFunc, im *slotImage) (patched, done bool, err error) {
	if s.noExchange || !s.spareSafe {
		return false, false, nil
	}
	var st unix.Stat_t
	if unix.Lstat(s.path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, false, nil
	}
	name := s.spare
	f, st, ok := s.openSpare(name)
	if !ok {
		return false, false, nil
	}
	defer func() { _ = f.Close() }() // releases the lock, after the exchange
	held, replaced := s.spareHolds, s.checkpointHolds
	s.checkpointHolds, s.spareHolds = nil, nil // known again only once this write succeeds
	var prev *slotImage
	if held != nil && im != nil && held.img.lay == im.lay && idOf(&st, true) == held.id {
		prev = held.img
	}
	if err := write(f, prev); err != nil {
		s.dropSpare(name)
		return false, true, fmt.Errorf("write temporary file: %w", err)
	}
	size := im.sizeOr(f)
	if size < st.Size {
		if err := f.Truncate(size); err != nil {
			s.dropSpare(name)
			return false, true, fmt.Errorf("truncate temporary file: %w", err)
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		s.dropSpare(name)
		return false, true, fmt.Errorf("sync temporary file: %w", err)
	}
	var written *fileContent
	if im != nil && unix.Fstat(int(f.Fd()), &st) == nil {
		written = &fileContent{img: im, id: idOf(&st, false)}
	}
	if err := exchangeFiles(name, s.path); err != nil {
		unsupported := errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP)
		if !unsupported && !errors.Is(err, fs.ErrNotExist) {
			s.dropSpare(name)
			return false, true, fmt.Errorf("exchange temporary file with checkpoint: %w", err)
		}
		if unsupported {
			s.noExchange = true
			s.logger.V(2).Info("File system cannot exchange names; checkpoint writes use a new temporary file each time", "path", s.path, "err", err.Error())
		}
		// The spare is whole and synced: put it in place as a new temporary file would be.
		if err := os.Rename(name, s.path); err != nil {
			s.dropSpare(name)
			return false, true, fmt.Errorf("rename temporary file: %w", err)
		}
		replaced = nil // it is gone, and nothing is at the spare's name
	}
	if err := syncDir(s.dir); err != nil {
		s.spareSafe = false // the exchange may not be on disk: the spare may still be the checkpoint there
		return false, true, err
	}
	s.checkpointHolds = written
	s.spareHolds = movedToSpare(name, replaced)
	return prev != nil, true, nil
}

// movedToSpare returns what the spare holds after an exchange moved the file of the previous
// write there, if the file at the spare's name is still that file as that write left it:
// same inode, size and modification time. Its change time, which the exchange itself set, is
// then part of its identity. It returns nil for anything else.
func movedToSpare(spare string, replaced *fileContent) *fileContent {
	var st unix.Stat_t
	if replaced == nil || unix.Lstat(spare, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || idOf(&st, false) != replaced.id {
		return nil
	}
	return &fileContent{img: replaced.img, id: idOf(&st, true)}
}

// idOf is st's fileID, with the change time when withCtime is set.
func idOf(st *unix.Stat_t, withCtime bool) fileID {
	id := fileID{dev: st.Dev, ino: st.Ino, size: st.Size, mtimeNs: st.Mtim.Nano()}
	if withCtime {
		id.ctimeNs, id.ctimeKnown = st.Ctim.Nano(), true
	}
	return id
}

// openSpare opens the spare for overwriting, creating it if it is missing, and locks it
// exclusively, and returns it with its stat. ok is false when the spare must not be used: it is not a regular file, has
// another name too, is not ours, another writer holds it, or it is no longer the file at the
// spare's name (a concurrent writer exchanged it). A spare of ours with another mode than 0600
// (a kubelet's checkpoint, 0644, that an exchange moved there) is removed and made anew: a
// process that opened it while it was readable must not read later checkpoints through it.
func (s *Store) openSpare(spare string) (f *os.File, st unix.Stat_t, ok bool) {
	for range 2 {
		fd, err := unix.Open(spare, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			fd, err = unix.Open(spare, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		}
		if err != nil {
			return nil, st, false
		}
		var cur unix.Stat_t
		ours := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil &&
			unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 &&
			int(st.Uid) == os.Geteuid() &&
			unix.Lstat(spare, &cur) == nil && cur.Dev == st.Dev && cur.Ino == st.Ino
		switch {
		case !ours:
			_ = unix.Close(fd)
			return nil, st, false
		case st.Mode&0o7777 != 0o600:
			err := unix.Unlink(spare) // still the file we hold: the lock keeps other Stores off
			_ = unix.Close(fd)
			if err != nil {
				return nil, st, false
			}
			continue
		}
		if err := unix.SetNonblock(fd, false); err != nil {
			_ = unix.Close(fd)
			return nil, st, false
		}
		return os.NewFile(uintptr(fd), spare), st, true
	}
	return nil, unix.Stat_t{}, false
}

// dropSpare removes the spare after a failed write: what it holds is incomplete.
func (s *Store) dropSpare(spare string) { _ = os.Remove(spare) }

// lockForRead returns the check under which the checkpoint at path is read (see
// readFileLocked): a shared flock on f, the file opened, then a check that f is still the
// file at path. errReadBusy means a Store holds f (it is being overwritten as a spare) or has
// moved it: the caller opens the path again. While the lock is held no Store overwrites f.
func lockForRead(path string) func(*os.File, fs.FileInfo) error {
	return func(f *os.File, fi fs.FileInfo) error {
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
			if errors.Is(err, unix.EWOULDBLOCK) {
				return errReadBusy
			}
			return nil // a file system without flock: read as before
		}
		if cur, err := os.Stat(path); err != nil || !os.SameFile(fi, cur) {
			return errReadBusy
		}
		return nil
	}
}

// startWriteback asks the kernel to start writing n bytes of f from off back to disk, without
// waiting for it (sync_file_range with SYNC_FILE_RANGE_WRITE). It makes nothing durable: the
// fsync that follows does. A failure is ignored for the same reason.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// fsyncDir fsyncs the directory dir. It opens dir with a plain open(2), not os.Open, whose
// file set-up (a poller registration the kernel refuses for a directory, and the flag calls
// around it) would add five system calls to every write.
func fsyncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open directory for sync: %w", &os.PathError{Op: "open", Path: dir, Err: err})
	}
	err = unix.Fsync(fd)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory: %w", &os.PathError{Op: "sync", Path: dir, Err: err})
	}
	return nil
}

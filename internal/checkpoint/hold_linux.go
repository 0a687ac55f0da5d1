package checkpoint

import "golang.org/x/sys/unix"

// heldFile is a reference to the file a write is about to replace (see holdFile).
type heldFile struct {
	fd   int
	size int64
}

// release drops the reference.
func (h *heldFile) release() { _ = unix.Close(h.fd) }

// holdFile opens path, if it names a regular file, so that the rename replacing it does not
// drop the file's last reference: its blocks are then freed when the reference is released.
// O_PATH opens the file neither for reading nor for writing, so whatever sits at path (a FIFO,
// a device node, a file without read permission) cannot block or refuse it; O_NOFOLLOW keeps a
// symlink's target out of it. It returns nil when there is nothing to hold: holding is only a
// way to take the freeing off the write's path.
func holdFile(path string) *heldFile {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		return nil
	}
	return &heldFile{fd: fd, size: st.Size}
}

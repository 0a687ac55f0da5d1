// Package hostfile reads files that anyone on the node may have put in place: the checkpoint,
// pod manifests, pod results. A FIFO, a device, a directory or an endless file at the path
// must neither hang nor exhaust the reader, and the error says what was found instead.
package hostfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// NotRegularError is Read's error for a path that holds something other than a regular file.
type NotRegularError struct {
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("not a regular file (%s)", Kind(e.Mode))
}

// TooLargeError is Read's error for a file of more than the allowed bytes.
type TooLargeError struct {
	Size, Limit int64
}

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("grew past the %d bytes allowed while being read", e.Limit)
	}
	return fmt.Sprintf("%d bytes, more than the %d allowed", e.Size, e.Limit)
}

// Read returns the content of the regular file at path and the opened file's metadata. It
// opens without blocking (a FIFO or a device cannot hang it, also when swapped in after a
// caller's stat), checks the opened file's own mode before reading anything, and reads at most
// limit bytes (limit <= 0: no bound). With follow false, a symbolic link as the last path
// element is refused (ELOOP). Errors are the open's (fs.ErrNotExist, permissions),
// *NotRegularError, *TooLargeError, or the read's.
func Read(path string, limit int64, follow bool) ([]byte, fs.FileInfo, error) {
	return ReadChecked(path, limit, follow, nil)
}

// ReadChecked is Read with check, when not nil, called on the opened regular file before
// anything is read from it; an error from check is returned as it is. The file stays open
// until the read ends, so a lock that check takes on it covers the whole read.
func ReadChecked(path string, limit int64, follow bool, check func(*os.File, fs.FileInfo) error) ([]byte, fs.FileInfo, error) {
	flags := os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOCTTY
	if !follow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, &NotRegularError{Mode: fi.Mode()}
	}
	if check != nil {
		if err := check(f, fi); err != nil {
			return nil, nil, err
		}
	}
	if limit <= 0 {
		data, err := readAll(f, fi.Size())
		return data, fi, err
	}
	if fi.Size() > limit {
		return nil, nil, &TooLargeError{Size: fi.Size(), Limit: limit}
	}
	data, err := readAll(io.LimitReader(f, limit+1), fi.Size())
	if err != nil {
		return nil, nil, err
	}
	if int64(len(data)) > limit {
		return nil, nil, &TooLargeError{Size: -1, Limit: limit}
	}
	return data, fi, nil
}

// readAll reads r to its end into a buffer made for size bytes (the file's size when opened),
// as os.ReadFile does: one allocation unless the file grew meanwhile.
func readAll(r io.Reader, size int64) ([]byte, error) {
	buf := make([]byte, 0, max(size, 0)+512) // room to see EOF without growing
	for {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
}

// Kind names a file type for an operator: "a named pipe", "a directory", ...
func Kind(m fs.FileMode) string {
	switch t := m.Type(); {
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a block device"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	case t == 0:
		return "a regular file"
	default:
		return "a file of type " + t.String()
	}
}

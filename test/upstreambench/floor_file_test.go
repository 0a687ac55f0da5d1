package upstreambench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kdm-project/kdm/checkpoint"
)

// span is a byte range of a checkpoint file that an op changes: [off, end).
type span struct{ off, end int }

// fileLayout says where the parts an op may change lie in an encoded checkpoint file.
type fileLayout struct {
	// entries are the PodDeviceEntries elements, in the file's order.
	entries []span
	// checksum is the digits of the Checksum field.
	checksum span
	// registered starts at the RegisteredDevices key: every registered device ID lies after it.
	registered int
}

// layoutOf finds the entries, the registered devices and the checksum of enc, a file
// checkpoint.Encode wrote ({"Data":{"PodDeviceEntries":[...],"RegisteredDevices":{...}},
// "Checksum":N}).
func layoutOf(enc []byte) (fileLayout, error) {
	var l fileLayout
	const entriesKey = `"PodDeviceEntries":`
	i := bytes.Index(enc, []byte(entriesKey))
	if i < 0 {
		return l, errors.New("no PodDeviceEntries in the file")
	}
	start := i + len(entriesKey)
	dec := json.NewDecoder(bytes.NewReader(enc[start:]))
	if t, err := dec.Token(); err != nil || t == nil {
		if err != nil {
			return l, fmt.Errorf("PodDeviceEntries: %w", err)
		}
		return l, nil // null: no entries
	}
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return l, fmt.Errorf("entry %d: %w", len(l.entries), err)
		}
		end := start + int(dec.InputOffset())
		l.entries = append(l.entries, span{end - len(raw), end})
	}
	const registeredKey = `"RegisteredDevices":`
	if l.registered = bytes.Index(enc, []byte(registeredKey)); l.registered < 0 {
		return l, errors.New("no RegisteredDevices in the file")
	}
	const checksumKey = `"Checksum":`
	c := bytes.LastIndex(enc, []byte(checksumKey))
	if c < 0 {
		return l, errors.New("no Checksum in the file")
	}
	l.checksum.off = c + len(checksumKey)
	l.checksum.end = l.checksum.off + bytes.IndexByte(enc[l.checksum.off:], '}')
	if l.checksum.end < l.checksum.off+1 {
		return l, errors.New("the Checksum field has no digits")
	}
	return l, nil
}

// device is the span of the registered device id (with its quotes).
func (l fileLayout) device(enc []byte, id string) (span, error) {
	i := bytes.Index(enc[l.registered:], []byte(`"`+id+`"`))
	if i < 0 {
		return span{}, fmt.Errorf("device %s is not registered in the file", id)
	}
	off := l.registered + i
	return span{off, off + len(id) + 2}, nil
}

// mustLayout is layoutOf for a benchmark's set-up.
func mustLayout(b testing.TB, enc []byte) fileLayout {
	b.Helper()
	l, err := layoutOf(enc)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// inPlace keeps a checkpoint file the way the floors replace it with the least work there
// is: two files of the same bytes, the one at the checkpoint's name and a spare, both open.
// A write overwrites only the changed spans of the spare, at their offsets, fdatasyncs it,
// exchanges the two names (renameat2 RENAME_EXCHANGE) and, if asked, fsyncs the directory.
// The bytes written are the ones already there: what costs is how many and where, and the
// file's size never changes, so fdatasync has no metadata to write.
type inPlace struct {
	enc         []byte
	path, spare string
	dir         *os.File
	files       [2]*os.File
	next        int // the index in files of the one at the spare's name
}

// newInPlace writes enc to the two files in dir and syncs them and the directory; b's
// cleanup closes them.
func newInPlace(b testing.TB, dir string, enc []byte) *inPlace {
	b.Helper()
	w := &inPlace{enc: enc, path: filepath.Join(dir, "floor"), spare: filepath.Join(dir, ".floor.spare"), next: 1}
	for i, p := range []string{w.path, w.spare} {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = f.Close() })
		if _, err := f.Write(enc); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		w.files[i] = f
	}
	d, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	if err := d.Sync(); err != nil {
		b.Fatal(err)
	}
	w.dir = d
	return w
}

// write durably replaces the file with the spare, overwriting spans of the spare first; with
// dirSync the exchange of names is synced too.
func (w *inPlace) write(dirSync bool, spans ...span) error {
	f := w.files[w.next]
	for _, s := range spans {
		if _, err := f.WriteAt(w.enc[s.off:s.end], int64(s.off)); err != nil {
			return err
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("fdatasync: %w", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, w.spare, unix.AT_FDCWD, w.path, unix.RENAME_EXCHANGE); err != nil {
		return fmt.Errorf("renameat2: %w", err)
	}
	if dirSync {
		if err := w.dir.Sync(); err != nil {
			return err
		}
	}
	w.next = 1 - w.next
	return nil
}

// whole is the span of the whole file.
func (w *inPlace) whole() span { return span{0, len(w.enc)} }

// encode is d's checkpoint file.
func encode(b testing.TB, d *checkpoint.Data) []byte {
	b.Helper()
	enc, err := checkpoint.Encode(d)
	if err != nil {
		b.Fatal(err)
	}
	return enc
}

// reportFile adds the size of the file written to b's results (after the loop: b.Loop's
// start deletes metrics reported before it).
func reportFile(b *testing.B, enc []byte) { b.ReportMetric(float64(len(enc))/(1<<20), "file-MiB") }

// reportWritten adds the bytes a floor's op overwrites to b's results.
func reportWritten(b *testing.B, spans ...span) {
	n := 0
	for _, s := range spans {
		n += s.end - s.off
	}
	b.ReportMetric(float64(n), "written-B/op")
}

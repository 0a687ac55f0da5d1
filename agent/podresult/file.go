package podresult

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/kdm-project/kdm/internal/hostfile"
)

// Path names a pod's result file inside dir: <namespace>_<name>_<uid>.json when every part is
// made of letters, digits, '.', '-' and '_' and the name fits a file name, and
// pod-<sha256 of the three>.json otherwise. The result is always a single file name below dir,
// whatever the pod's metadata holds.
func Path(dir string, pod *v1.Pod) string {
	name := fmt.Sprintf("%s_%s_%s.json", pod.Namespace, pod.Name, pod.UID)
	if !safeFileName(name) || pod.Namespace == "" || pod.Name == "" || pod.UID == "" {
		sum := sha256.Sum256([]byte(pod.Namespace + "\x00" + pod.Name + "\x00" + string(pod.UID)))
		name = fmt.Sprintf("pod-%x.json", sum[:16])
	}
	return filepath.Join(dir, name)
}

// maxFileName is the longest file name the common Linux file systems take.
const maxFileName = 255

// safeFileName reports whether name is a plain, visible file name of portable characters.
func safeFileName(name string) bool {
	if len(name) > maxFileName || strings.HasPrefix(name, ".") {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
		default:
			return false
		}
	}
	return filepath.IsLocal(name) && filepath.Base(name) == name
}

// tempPattern names the temporary files Write renames into place.
const tempPattern = ".pod-*.tmp"

// Write writes the pod's result to Path(dir, pod) atomically (temporary file, fsync, rename),
// creating dir if needed. A result whose file would be larger than MaxFileSize is an error,
// as one that could not be read back. On failure the previous file, if any, is left as it was.
func Write(dir string, pod *v1.Pod, r *PodResult) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if len(data)+1 > MaxFileSize {
		return fmt.Errorf("pod result for %s/%s not written: %d bytes, more than the %d a result may have (ReadFile would refuse it)",
			pod.Namespace, pod.Name, len(data)+1, MaxFileSize)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, tempPattern)
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(append(data, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing pod result for %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if err := os.Rename(tmp, Path(dir, pod)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// RemoveTemps removes the temporary files a crash left in dir in the middle of a Write.
func RemoveTemps(dir string) {
	matches, _ := filepath.Glob(filepath.Join(dir, tempPattern))
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

// ReadFile reads and decodes one pod result file. A symbolic link, a file that is not regular
// (a FIFO does not block the read), one larger than MaxFileSize, one that does not decode or
// one without a pod UID is an error naming the file.
func ReadFile(path string) (*PodResult, error) {
	r, _, err := readFile(path)
	return r, err
}

// readFile is ReadFile, also returning the bytes it read (on failure too), which Scan counts.
func readFile(path string) (*PodResult, int, error) {
	data, _, err := hostfile.Read(path, MaxFileSize, false)
	if err != nil {
		return nil, len(data), fmt.Errorf("pod result %s: %w", path, err)
	}
	r := &PodResult{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, len(data), fmt.Errorf("pod result %s: %w", path, err)
	}
	if r.UID == "" {
		return nil, len(data), fmt.Errorf("pod result %s: no pod UID", path)
	}
	return r, len(data), nil
}

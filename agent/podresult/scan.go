package podresult

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// The bounds on what reading the results directory costs. A result kdm writes holds a few KiB
// per container (the golden two-container result is 5 KiB), and a node runs at most a few
// hundred pods; anything far larger was not written by kdm and is refused with a reason rather
// than read, so that a directory filled with big or numerous files cannot make a start slow or
// large.
const (
	// MaxFileSize is the largest result file read or written: room for hundreds of
	// containers' devices and run options.
	MaxFileSize = 1 << 20
	// MaxScanBytes is the most that one Scan reads in all: over three thousand results of the size
	// kdm writes. Files are read smallest first, so the results kdm wrote are read before
	// the budget runs out on large strangers.
	MaxScanBytes = 16 << 20
	// MaxScanFiles is the most *.json files one Scan considers; it reports the rest, unread,
	// in one error.
	MaxScanFiles = 5000
)

// listBatch is how many directory entries Scan lists at a time.
const listBatch = 1024

// ReadDir reads every pod result in dir, keyed by pod UID. Files that cannot be read or
// decoded, or that are past Scan's bounds, are skipped (ScanDir says why). A missing dir
// holds no results and is no error.
func ReadDir(dir string) (map[types.UID]*PodResult, error) {
	out, _, err := ScanDir(dir)
	return out, err
}

// ScanDir is ReadDir, and also says why each skipped *.json file was skipped.
func ScanDir(dir string) (map[types.UID]*PodResult, []error, error) {
	out := map[types.UID]*PodResult{}
	skipped, err := Scan(dir, func(r *PodResult) { out[r.UID] = r })
	if err != nil {
		return nil, nil, err
	}
	return out, skipped, nil
}

// Scan reads the pod results in dir one at a time, smallest file first, and hands each that
// decodes to fn; nothing of a result is kept once fn returns, so a caller that keeps only what
// it needs holds no more than that. Of two files naming one pod UID, fn sees both.
//
// Files whose names start with '.' and those not ending in .json are not results and are left
// alone. Each other file that is not used is reported in skipped with the reason, naming the
// file: it cannot be read or decoded (see ReadFile), it is larger than MaxFileSize, the files
// read before it used up MaxScanBytes, or it is past the first MaxScanFiles (one error for all
// of those). A missing dir holds no results and is no error; a dir that cannot be listed is
// the error.
func Scan(dir string, fn func(*PodResult)) (skipped []error, err error) {
	files, over, err := listResults(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	budget := MaxScanBytes
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if f.size > MaxFileSize {
			// Refused on its size without opening it; ReadFile also bounds the read, for a
			// file that grows after the listing.
			skipped = append(skipped, fmt.Errorf("pod result %s: %d bytes, more than the %d a result may have", path, f.size, MaxFileSize))
			continue
		}
		if f.size > int64(budget) {
			skipped = append(skipped, fmt.Errorf("pod result %s: not read: the results read before it took %d of the %d bytes a scan reads; results kdm writes are a few KiB",
				path, MaxScanBytes-budget, MaxScanBytes))
			continue
		}
		r, n, err := readFile(path)
		budget -= n
		if err != nil {
			skipped = append(skipped, err)
			continue
		}
		fn(r)
	}
	if over > 0 {
		skipped = append(skipped, fmt.Errorf("pod results in %s: %d *.json files past the first %d were not read", dir, over, MaxScanFiles))
	}
	return skipped, nil
}

// resultFile is a directory entry that may be a result, with the size its listing gave.
type resultFile struct {
	name string
	size int64
}

// listResults lists the *.json files of dir that do not start with '.', smallest first (then
// by name), at most MaxScanFiles of them; over counts those left out. Entries are listed in
// batches, so a directory of millions of names is never held whole.
func listResults(dir string) (files []resultFile, over int, err error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = d.Close() }()
	for {
		entries, err := d.ReadDir(listBatch)
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
				continue
			}
			if len(files) == MaxScanFiles {
				over++
				continue
			}
			var size int64
			if info, err := e.Info(); err == nil {
				size = info.Size() // a file removed since the listing fails its read
			}
			files = append(files, resultFile{name, size})
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
	}
	sort.Slice(files, func(i, j int) bool {
		if files[i].size != files[j].size {
			return files[i].size < files[j].size
		}
		return files[i].name < files[j].name
	})
	return files, over, nil
}

package powercut

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FS is a mounted power-cut file system. Its methods may be called from any goroutine.
type FS struct {
	dir    string
	server *fuse.Server

	mu     sync.Mutex
	m      *model
	ops    int      // counted ops so far
	log    []string // their descriptions
	cutAt  int      // cut once ops reaches it; 0: never
	cut    bool
	image  *Image        // the durable state at the cut
	cutNow chan struct{} // closed at the cut

	dropFileSyncs, dropDirSyncs bool
	writeBack                   bool
}

// Available reports why no power-cut file system can be mounted here (nil when one can):
// /dev/fuse must exist and open for reading and writing.
func Available() error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("the power-cut file system needs FUSE: %w", err)
	}
	return f.Close()
}

// Mount mounts a power-cut file system at the existing empty directory dir, holding img (nil:
// an empty one), all of it durable. As root it calls mount(2) itself; otherwise go-fuse uses
// fusermount3. Unmount it when done.
func Mount(dir string, img *Image) (*FS, error) {
	if img == nil {
		img = EmptyImage()
	}
	f := &FS{dir: dir, m: img.m.durableCopy(), cutNow: make(chan struct{})}
	srv, err := fuse.NewServer(&rawFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), fs: f}, dir, &fuse.MountOptions{
		FsName:             "powercut",
		Name:               "powercut",
		DirectMount:        true,
		DisableReadDirPlus: true,
		MaxWrite:           1 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("mounting the power-cut file system at %s: %w", dir, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount()
		return nil, fmt.Errorf("mounting the power-cut file system at %s: %w", dir, err)
	}
	f.server = srv
	return f, nil
}

// Dir is the mount point.
func (f *FS) Dir() string { return f.dir }

// op runs a counted op under the mutex: apply changes the model and describes what it did.
// A failed op changes nothing and is not counted. Once the power is cut every op fails with
// EIO.
func (f *FS) op(apply func() (string, fuse.Status)) fuse.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return fuse.EIO
	}
	desc, st := apply()
	if !st.Ok() {
		return st
	}
	f.ops++
	f.log = append(f.log, desc)
	if f.cutAt > 0 && f.ops >= f.cutAt {
		f.cutLocked()
	}
	return st
}

func (f *FS) cutLocked() {
	if f.cut {
		return
	}
	f.cut = true
	if f.writeBack {
		for _, n := range f.m.nodes {
			if !n.isDir() {
				n.durable = slices.Clone(n.data)
			}
		}
	}
	f.image = &Image{m: f.m.durableCopy()}
	close(f.cutNow)
}

// Ops returns how many counted ops (writes, truncations, name changes, fsyncs) the file
// system has performed since it was mounted.
func (f *FS) Ops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// Log returns the descriptions of the counted ops from the from-th (0-based) on, such as
// "write kubelet_internal_checkpoint [0,512)" or "rename exchange a b".
func (f *FS) Log(from int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if from > len(f.log) {
		return nil
	}
	return append([]string(nil), f.log[from:]...)
}

// CutAfter arms a power cut right after the n-th counted op from now (n >= 1): that op takes
// effect, and from then on every call fails with EIO and changes nothing. Cut (or Cutting)
// tells when it happened.
func (f *FS) CutAfter(n int) {
	if n < 1 {
		panic("powercut: CutAfter needs n >= 1")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cutAt = f.ops + n
}

// Cutting is closed when the power is cut.
func (f *FS) Cutting() <-chan struct{} { return f.cutNow }

// Cut cuts the power now, unless it is cut already, and returns what the disk holds: the
// durable state at the moment of the cut.
func (f *FS) Cut() *Image {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cutLocked()
	return f.image
}

// Durable returns what a cut now would leave, without cutting.
func (f *FS) Durable() *Image {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return f.image
	}
	return &Image{m: f.m.durableCopy()}
}

// SyncAll makes everything the running system sees durable, as a machine does that stays up
// long enough (a sync(2)). It is not a counted op.
func (f *FS) SyncAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.cut {
		f.m.syncAll()
	}
}

// DropSyncs makes later fsyncs of files (fsync and fdatasync), of directories, or of both
// succeed without making anything durable, like a disk that acknowledges a cache flush it
// never does. Tests use it to show that their checks catch a program that skips a sync.
func (f *FS) DropSyncs(files, dirs bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropFileSyncs, f.dropDirSyncs = files, dirs
}

// WriteBackAtCut makes the cut keep every write made before it, synced or not, as if the
// kernel had written all dirty pages back just before the power went: file contents reach the
// disk, names still only by a directory sync. Cut at every op, this is the other extreme from
// the default (no unsynced write reaches the disk), and it shows a file overwritten in place
// while its name is durable as the torn file a cut between two of its writes leaves.
func (f *FS) WriteBackAtCut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writeBack = true
}

// Unmount unmounts the file system and waits for its server to end. Every file in it must be
// closed by then; Unmount retries for a few seconds while the kernel says it is busy.
func (f *FS) Unmount() error {
	var err error
	for range 50 {
		if err = f.server.Unmount(); err == nil {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("unmounting the power-cut file system at %s: %w", f.dir, err)
}

// RequireEnv names the environment variable that turns a missing FUSE from a skip into a
// failure (CI sets it, so that the power-cut suites never pass by not running).
const RequireEnv = "KDM_REQUIRE_FUSE"

// SkipUnlessAvailable skips tb, saying why, when no power-cut file system can be mounted
// here, or fails it when RequireEnv is set.
func SkipUnlessAvailable(tb testing.TB) {
	tb.Helper()
	err := Available()
	switch {
	case err == nil:
	case os.Getenv(RequireEnv) != "":
		tb.Fatalf("%v (%s is set: the power-cut tests must run)", err, RequireEnv)
	default:
		tb.Skipf("skipping: %v (set %s to fail instead)", err, RequireEnv)
	}
}

package manifests

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// manifestIdentitySettle is how long new content that gives a file's pod another identity
// (another UID) must have stood unchanged before it replaces the running pod. A manifest
// without metadata.uid gets a UID derived from its content, so any edit is a new pod, and the
// first part of a slow rewrite in place (a valid pod without its resources, say) is one too:
// judged early, it would release the running pod's devices to whoever asks next. A real
// replacement (a new file renamed into place, an edit that really is a new pod) takes effect
// this long after its last change; a file deleted and then created is no identity change, as
// the deletion itself releases the pod. The time is measured from the file's change time (not
// the modification time, which tools may set back), so it holds across a restart; a change
// time ahead of the source's clock counts from when the source first read the content.
const manifestIdentitySettle = 5 * time.Second

// manifestWriterWait is the longest a process that keeps a manifest open for writing holds
// the file's new content back, counted from the file's last change: content is judged only
// once its writer has closed the file, unless the writer sits idle this long. It also bounds
// how long the first listing after a start waits for files that are still being written.
const manifestWriterWait = time.Minute

// manifestWriterPoll is how often a file held back because a writer has it open is looked at
// again: closing a file raises no event that the watch receives.
const manifestWriterPoll = time.Second

// pendingContent is a file's newest content that has not been judged yet, decoded once.
type pendingContent struct {
	hash  [32]byte
	since time.Time // when the source first read it
	mp    *Pod
	err   error // why the content is no pod at all
}

// hold reports whether the file's new content pc, read with stamp, must not be judged yet,
// and if so makes sure the source asks to be scanned again when it may be.
// Content is held back while the directory is still changing (manifestDebounce), while the
// file changed during the read or a process has it open for writing (manifestWriterWait), and,
// when it gives the file's pod another identity, until it has stood for
// manifestIdentitySettle. A valid pod admitted before a restart and not seen since is judged
// at once: its devices cannot change. A one-shot read holds nothing back.
func (s *manifestSource) hold(path string, f *manifestFile, stamp fileStamp, pc *pendingContent) bool {
	if s.debounce <= 0 {
		return false
	}
	if mp := pc.mp; mp != nil && mp.Invalid == nil && s.known != nil && s.known(mp.Pod.UID) {
		return false
	}
	if s.holdBack(stamp) {
		return true
	}
	now := s.now()
	since := stamp.changedAt()
	if since.After(now) {
		since = pc.since
	}
	current, writing, err := s.writers(path)
	switch {
	case errors.Is(err, fs.ErrNotExist), err == nil && current != stamp:
		// Changed under the read: the content read may already be stale.
		s.retryBy(now.Add(s.debounce))
		return true
	case writing && now.Sub(since) < manifestWriterWait:
		s.retryBy(minTime(now.Add(manifestWriterPoll), since.Add(manifestWriterWait)))
		return true
	}
	if pc.mp == nil {
		return false
	}
	if prev := s.identity(f, pc.mp.Pod); prev != "" && prev != pc.mp.Pod.UID {
		if ready := since.Add(manifestIdentitySettle); now.Before(ready) {
			s.retryBy(ready)
			return true
		}
	}
	return false
}

// identity returns the UID of the running pod that the file's new content, naming pod, would
// replace: the file's last good version, or, after a restart, a pod of the same namespace
// and name that was admitted before it and has not been seen since (the new source does not
// know which file held it, and the first part of a rewrite that parses as a pod already names
// the pod). It returns "" when there is none.
func (s *manifestSource) identity(f *manifestFile, pod *v1.Pod) types.UID {
	if f.last != nil {
		return f.last.Pod.UID
	}
	if s.known == nil {
		return ""
	}
	for _, uid := range s.restored[pod.Namespace+"/"+pod.Name] {
		if uid != pod.UID && s.known(uid) {
			return uid
		}
	}
	return ""
}

// retryBy makes sure the source asks to be scanned again by t.
func (s *manifestSource) retryBy(t time.Time) {
	if s.retryAt.IsZero() || t.Before(s.retryAt) {
		s.retryAt = t
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// openWriters opens the file at path (symbolic links followed, never blocking) and reports its
// stamp and whether any process has it open for writing. It asks the kernel for a read lease,
// which is refused (EAGAIN) exactly while the file is open for writing anywhere on the node, in
// any namespace, and gives it back at once: no /proc walk, one open and three fcntl calls per
// file. A lease needs the file's owner or CAP_LEASE (kdm runs as root) and a file system that
// supports it; where it cannot be taken the answer is "no writer" with a nil error, and the
// settle times alone apply. A writer that opens the file in the microseconds the lease is held
// waits for it to be given back (or, with O_NONBLOCK, is told to retry).
func openWriters(path string) (fileStamp, bool, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return fileStamp{}, false, err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return fileStamp{}, false, err
	}
	stamp := stampOf(fi)
	if !fi.Mode().IsRegular() {
		return stamp, false, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return stamp, false, nil
	}
	var leaseErr error
	if err := rc.Control(func(fd uintptr) {
		// A writer that opens the file while the lease is held makes the kernel signal the
		// holder: SIGURG, which every Go program ignores (Go uses it only to preempt
		// goroutines), rather than SIGIO, which ends a process that embeds kdm through
		// c-shared or c-archive.
		if _, leaseErr = unix.FcntlInt(fd, unix.F_SETSIG, int(unix.SIGURG)); leaseErr != nil {
			return
		}
		if _, leaseErr = unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_RDLCK); leaseErr == nil {
			_, _ = unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_UNLCK) // closing gives it back too
		}
	}); err != nil {
		return stamp, false, nil
	}
	return stamp, errors.Is(leaseErr, unix.EAGAIN), nil
}

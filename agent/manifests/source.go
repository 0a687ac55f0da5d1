package manifests

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/kdm-project/kdm/internal/hostfile"
)

// MaxFileSize is the largest pod manifest kdm reads. A bigger file is skipped and counts as
// unreadable: the pod of its last good version stays.
const MaxFileSize = 10 << 20

// manifestSettle is how long after its last modification a file's stat is not trusted to
// reveal a further change: a file written twice within one timestamp tick keeps its size and
// times. Such a file is read again on the next pass; its content hash avoids a re-parse.
const manifestSettle = 2 * time.Second

// manifestDebounce is how long after the directory's last change a manifest's new content is
// taken to be still in the writing: cp, editors and shell redirections truncate or create the
// file and fill it in several writes, and the first part of a pod may itself be a valid pod (one
// whose resources are not written yet). New content is judged once no manifest of the
// directory has changed for this long, so files written or moved in together are also admitted
// together, in order: before that it is not admitted, its problem is not reported and a pod
// that fails validation is not rejected, and the file's last good version, if any, stays.
//
// Three exceptions keep the wait short and bounded. A valid pod that the agent admitted before
// a restart and has not seen since (known) is judged at once: its devices cannot change, so a
// restart does not leave it out of podresources while its file merely looks recent (a chmod
// changes the change time). A file whose own change is manifestSettle old is judged whatever
// else keeps changing. A change time ahead of the source's clock does not count as recent, so a
// future timestamp (touch -d) cannot hold a pod back.
const manifestDebounce = 200 * time.Millisecond

// Pod is a pod read from the manifest directory, with the file it came from.
type Pod struct {
	Pod  *v1.Pod
	Path string // the manifest file
	// Invalid says why the pod failed Validate, nil for a valid pod. If its own UID was
	// unusable, Pod's UID is a key derived from the file's name and content.
	Invalid error
}

// manifestSource reads the manifest directory and remembers, per file, the last version that
// could be read: a file that is empty, partially written, unparseable, too large or not a
// regular file changes nothing, so its pod keeps running. A pod goes away only when its file
// does, or when the file holds another pod (another UID) and that content has settled (see
// hold: no writer has the file open, and it has stood for manifestIdentitySettle).
//
// A file is read again only when its size, modification or change time, device or inode
// changed; each problem is reported once per version of the file. A manifestSource is owned by
// one goroutine and is not safe for concurrent use.
type manifestSource struct {
	dir   string
	files map[string]*manifestFile // by file name
	owner map[types.UID]string     // which file supplied each UID in the last scan
	now   func() time.Time         // for the settle check; the agent sets its clock's
	read  func(path string, limit int64) ([]byte, os.FileInfo, error)
	seen  map[string]map[string]bool // problems reported per file, reset when the file changes
	// debounce is manifestDebounce for a watching source, zero for a one-shot read.
	debounce time.Duration
	// retryAt is when the earliest file held back by manifestDebounce in the last scan is old
	// enough to be judged; zero when none was.
	retryAt time.Time
	// lastChange is, in the current scan, the latest change time of the directory's manifests
	// that is not ahead of the clock.
	lastChange time.Time
	// known reports whether a pod with this UID was admitted before a restart and not seen
	// since (nil: none); see manifestDebounce.
	known func(types.UID) bool
	// restored lists, by "namespace/name", the UIDs of the pods admitted before a restart:
	// the running pods whose files a new source cannot tell (see identity).
	restored map[string][]types.UID
	// writers reports a file's stamp and whether a process has it open for writing
	// (openWriters).
	writers func(path string) (fileStamp, bool, error)
}

// manifestFile is what the source knows of one file.
type manifestFile struct {
	stat    fileStamp
	settled bool     // stat is trusted: the file was read whole and is past manifestSettle
	hash    [32]byte // of the content last read
	read    bool     // hash is set
	last    *Pod     // the last good version: a pod, valid or not
	// lastHash is the hash of last's content.
	lastHash [32]byte
	// pending is the newest content not judged yet (see hold), nil when there is none.
	pending *pendingContent
}

// fileStamp identifies one version of a file by its metadata.
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

// changedAt is the later of the modification and change times: when the file's content or
// metadata last changed, even if its modification time was set back (cp -p, touch -d).
func (s fileStamp) changedAt() time.Time {
	m, c := time.Unix(s.mtime.Unix()), time.Unix(s.ctime.Unix())
	if c.After(m) {
		return c
	}
	return m
}

func stampOf(fi os.FileInfo) fileStamp {
	s := fileStamp{size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = uint64(st.Dev), st.Ino
		s.mtime, s.ctime = st.Mtim, st.Ctim
	} else {
		s.mtime = syscall.NsecToTimespec(fi.ModTime().UnixNano())
	}
	return s
}

func newManifestSource(dir string) *manifestSource {
	return &manifestSource{dir: dir, files: map[string]*manifestFile{}, owner: map[types.UID]string{},
		seen: map[string]map[string]bool{}, now: time.Now, read: readManifestFile, debounce: manifestDebounce,
		writers: openWriters}
}

// Read reads every manifest in dir once, as a fresh source's first scan does, except
// that no file is held back as still being written: there is no second look.
func Read(dir string) (map[types.UID]Pod, []error) {
	src := newManifestSource(dir)
	src.debounce = 0
	pods, problems, err := src.scan()
	if err != nil {
		return nil, append(problems, err)
	}
	return pods, problems
}

// isManifestName reports whether a directory entry is a manifest by its name: files starting
// with "." and extensions other than .yaml, .yml and .json are ignored, as the kubelet does for
// its static pod path.
func isManifestName(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return !strings.HasPrefix(name, ".") && (ext == ".yaml" || ext == ".yml" || ext == ".json")
}

// scan lists the directory and returns the current pods by UID: for every manifest file, its
// last good version. problems are the issues not reported before (each names its file); err is
// set when the directory itself cannot be listed, and then nothing is returned.
func (s *manifestSource) scan() (map[types.UID]Pod, []error, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("reading pod manifest directory %s: %w", s.dir, err)
	}
	var problems []error
	listed := map[string]bool{}
	s.retryAt = time.Time{}
	s.lastChange = s.latestChange(entries)
	for _, e := range entries {
		name := e.Name()
		if !isManifestName(name) {
			continue
		}
		gone, problem := s.refresh(name)
		if gone {
			continue
		}
		listed[name] = true
		if problem != nil && s.firstReport(name, problem) {
			problems = append(problems, problem)
		}
	}
	for name := range s.files {
		if !listed[name] {
			delete(s.files, name)
			delete(s.seen, name)
		}
	}
	pods, dups := s.current()
	for _, d := range dups {
		if s.firstReport(filepath.Base(d.path), d.err) {
			problems = append(problems, d.err)
		}
	}
	return pods, problems, nil
}

// latestChange is the latest change time among the manifests listed in entries that is not
// ahead of the clock (zero for a one-shot read, which holds nothing back).
func (s *manifestSource) latestChange(entries []os.DirEntry) time.Time {
	var latest time.Time
	if s.debounce <= 0 {
		return latest
	}
	now := s.now()
	for _, e := range entries {
		if !isManifestName(e.Name()) {
			continue
		}
		fi, err := os.Stat(filepath.Join(s.dir, e.Name()))
		if err != nil {
			continue
		}
		if c := stampOf(fi).changedAt(); c.After(latest) && !c.After(now) {
			latest = c
		}
	}
	return latest
}

// refresh brings one file's entry up to date. gone is true when the file no longer exists (a
// dangling symbolic link counts as gone). problem says why the current version could not be
// used; the last good version then stays.
func (s *manifestSource) refresh(name string) (gone bool, problem error) {
	path := filepath.Join(s.dir, name)
	f := s.files[name]
	if f == nil {
		f = &manifestFile{}
		s.files[name] = f
	}
	fi, err := os.Stat(path) // follows symbolic links
	switch {
	case errors.Is(err, fs.ErrNotExist):
		delete(s.files, name)
		delete(s.seen, name)
		return true, nil
	case err != nil:
		return false, fmt.Errorf("pod manifest %s: %w", path, err)
	case !fi.Mode().IsRegular():
		s.changed(name, f, stampOf(fi))
		return false, fmt.Errorf("pod manifest %s is %v; skipped", path, &hostfile.NotRegularError{Mode: fi.Mode()})
	}
	stamp := stampOf(fi)
	if f.settled && f.stat == stamp {
		return false, nil
	}
	s.changed(name, f, stamp)
	if fi.Size() > MaxFileSize {
		return false, fmt.Errorf("pod manifest %s is %v; skipped", path, &hostfile.TooLargeError{Size: fi.Size(), Limit: MaxFileSize})
	}
	data, ofi, err := s.read(path, MaxFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		delete(s.files, name)
		delete(s.seen, name)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("pod manifest %s: %w", path, err)
	}
	stamp = stampOf(ofi)
	s.changed(name, f, stamp)
	f.settled = int64(len(data)) == ofi.Size() && s.now().Sub(stamp.changedAt()) >= manifestSettle
	hash := sha256.Sum256(data)
	if f.read && f.hash == hash {
		f.pending = nil
		return false, nil // this content was handled, and any problem with it reported
	}
	if f.last != nil && f.lastHash == hash {
		f.hash, f.read, f.pending = hash, true, nil
		return false, nil // back to the last good version, after an empty or partial one
	}
	pc := f.pending
	if pc == nil || pc.hash != hash {
		pc = decodeContent(name, path, data, hash)
		pc.since = s.now()
		f.pending = pc
	}
	if s.hold(path, f, stamp, pc) {
		f.settled = false // read it again on the next pass, however old it is
		return false, nil
	}
	f.hash, f.read, f.pending = hash, true, nil
	if pc.err != nil {
		return false, pc.err
	}
	f.last, f.lastHash = pc.mp, hash
	return false, nil
}

// decodeContent parses a manifest file's content into the pod it holds, valid or not. A pod
// that failed validation and whose own UID cannot key it is keyed by the file's name and
// content.
func decodeContent(name, path string, data []byte, hash [32]byte) *pendingContent {
	pc := &pendingContent{hash: hash}
	if len(bytes.TrimSpace(data)) == 0 {
		pc.err = fmt.Errorf("pod manifest %s is empty; skipped", path)
		return pc
	}
	pod, err := Decode(data)
	if err != nil {
		pc.err = fmt.Errorf("pod manifest %s: %w", path, err)
		return pc
	}
	pc.mp = &Pod{Pod: pod, Path: path}
	if verr := Validate(pod); verr != nil {
		pc.mp.Invalid = verr
		if checkUID(string(pod.UID)) != "" {
			p := *pod
			sum := sha256.Sum256(append([]byte(name+"\x00"), data...))
			p.UID = types.UID(fmt.Sprintf("invalid-%x", sum[:16]))
			pc.mp.Pod = &p
		}
	}
	return pc
}

// holdBack reports whether new content of a file that changed at stamp must wait for the
// directory to settle (see manifestDebounce), and if so makes sure the source asks to be
// scanned again when it may be judged.
func (s *manifestSource) holdBack(stamp fileStamp) bool {
	now, changed := s.now(), stamp.changedAt()
	if s.debounce <= 0 || now.Before(changed) {
		return false
	}
	giveUp := changed.Add(manifestSettle) // however busy the directory stays
	ready := changed
	if s.lastChange.After(ready) {
		ready = s.lastChange
	}
	ready = ready.Add(s.debounce)
	if giveUp.Before(ready) {
		ready = giveUp
	}
	if !now.Before(ready) {
		return false
	}
	s.retryBy(ready)
	return true
}

// retryIn says how long after now the source wants another scan because a file was held back
// by manifestDebounce; zero when it does not.
func (s *manifestSource) retryIn() time.Duration {
	if s.retryAt.IsZero() {
		return 0
	}
	return max(s.retryAt.Sub(s.now()), time.Millisecond)
}

// changed forgets the problems reported for a file whose stamp moved: its next problem is
// news.
func (s *manifestSource) changed(name string, f *manifestFile, stamp fileStamp) {
	if f.stat != stamp {
		f.stat, f.settled = stamp, false
		delete(s.seen, name)
	}
}

// firstReport records that problem was reported for the file's current version and says
// whether it was the first time.
func (s *manifestSource) firstReport(name string, problem error) bool {
	msg := problem.Error()
	if s.seen[name][msg] {
		return false
	}
	if s.seen[name] == nil {
		s.seen[name] = map[string]bool{}
	}
	s.seen[name][msg] = true
	return true
}

type duplicate struct {
	path string
	err  error
}

// current assembles the pods of the files' last good versions. When two files hold the same
// UID, the file that held it before keeps it; otherwise the first by name does.
func (s *manifestSource) current() (map[types.UID]Pod, []duplicate) {
	names := make([]string, 0, len(s.files))
	for name, f := range s.files {
		if f.last != nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	owner := map[types.UID]string{}
	for _, name := range names {
		uid := s.files[name].last.Pod.UID
		if cur, taken := owner[uid]; !taken || (s.owner[uid] == name && cur != name) {
			owner[uid] = name
		}
	}
	pods := map[types.UID]Pod{}
	var dups []duplicate
	for _, name := range names {
		mp := s.files[name].last
		if owner[mp.Pod.UID] != name {
			winner := filepath.Join(s.dir, owner[mp.Pod.UID])
			dups = append(dups, duplicate{path: mp.Path,
				err: fmt.Errorf("pod manifest %s: same pod UID %s as %s; ignored", mp.Path, mp.Pod.UID, winner)})
			continue
		}
		pods[mp.Pod.UID] = *mp
	}
	s.owner = owner
	return pods, dups
}

// readManifestFile reads a manifest: a regular file of at most limit bytes, symbolic links
// followed, never blocking (see hostfile.Read). It returns the data and the opened file's
// metadata; a refusal says "; skipped".
func readManifestFile(path string, limit int64) ([]byte, os.FileInfo, error) {
	data, fi, err := hostfile.Read(path, limit, true)
	if err != nil {
		return nil, nil, fmt.Errorf("%w; skipped", err)
	}
	return data, fi, nil
}

// Decode parses one pod (YAML or JSON). The namespace defaults to "default"; a pod
// without a UID gets one derived from its content, so an edited manifest is a new pod, as
// with the kubelet's static pods. It checks only what makes the data a pod at all; Validate
// checks the rest.
func Decode(data []byte) (*v1.Pod, error) {
	pod := &v1.Pod{}
	if err := yaml.UnmarshalStrict(data, pod); err != nil {
		return nil, fmt.Errorf("not a valid pod: %w", err)
	}
	if pod.Kind != "" && pod.Kind != "Pod" {
		return nil, fmt.Errorf("kind is %q, want Pod", pod.Kind)
	}
	if pod.Name == "" {
		return nil, errors.New("metadata.name is required")
	}
	if len(pod.Spec.Containers) == 0 {
		return nil, errors.New("spec.containers must not be empty")
	}
	if pod.Namespace == "" {
		pod.Namespace = "default"
	}
	if pod.UID == "" {
		sum := sha256.Sum256(data)
		pod.UID = types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16]))
	}
	return pod, nil
}

// sortedPods returns the pods ordered by namespace, name and UID.
func sortedPods(pods map[types.UID]Pod) []Pod {
	out := make([]Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Pod, out[j].Pod
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.UID < b.UID
	})
	return out
}

package powercut

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// node is one inode of the model: what the running system sees (data, entries) beside what a
// power cut would leave of it (durable, durEntries).
type node struct {
	ino      uint64
	mode     uint32 // S_IFMT and permission bits
	uid, gid uint32
	nlink    uint32 // current names (plus one for a directory's own "."), as stat reports it
	atime    time.Time
	mtime    time.Time
	ctime    time.Time
	name     string // the last name it was given, for the op log only

	// data is a regular file's current content or a symlink's target; durable is the content
	// as of the file's last fsync or fdatasync (a symlink's target is durable at once).
	data    []byte
	durable []byte

	// entries are a directory's current names; durEntries its names as of its last fsync.
	entries    map[string]uint64
	durEntries map[string]uint64
}

func (n *node) isDir() bool { return n.mode&syscall.S_IFMT == syscall.S_IFDIR }

// model is the whole file system: every inode by number, the root being rootIno. Inodes are
// never freed while a model lives (a name removed may still be a durable name elsewhere).
type model struct {
	nodes map[uint64]*node
	next  uint64
}

// rootIno is the FUSE root node id.
const rootIno = 1

func newModel() *model {
	now := time.Now()
	root := &node{ino: rootIno, mode: syscall.S_IFDIR | 0o755, nlink: 2, atime: now, mtime: now, ctime: now,
		entries: map[string]uint64{}, durEntries: map[string]uint64{}}
	return &model{nodes: map[uint64]*node{rootIno: root}, next: rootIno + 1}
}

// add creates an inode with mode (type and permissions); it has no name yet.
func (m *model) add(mode, uid, gid uint32, name string) *node {
	now := time.Now()
	n := &node{ino: m.next, mode: mode, uid: uid, gid: gid, atime: now, mtime: now, ctime: now, name: name}
	if n.isDir() {
		n.entries, n.durEntries = map[string]uint64{}, map[string]uint64{}
		n.nlink = 1
	}
	m.next++
	m.nodes[n.ino] = n
	return n
}

// syncAll makes the whole current state durable.
func (m *model) syncAll() {
	for _, n := range m.nodes {
		if n.isDir() {
			n.durEntries = cloneEntries(n.entries)
		} else {
			n.durable = slices.Clone(n.data)
		}
	}
}

// durableCopy returns the model a power cut leaves: the inodes reachable from the root by
// durable names, each with its durable content as its current one.
func (m *model) durableCopy() *model {
	out := &model{nodes: map[uint64]*node{}, next: m.next}
	var walk func(ino uint64)
	walk = func(ino uint64) {
		if c, ok := out.nodes[ino]; ok {
			c.nlink++
			return
		}
		n := m.nodes[ino]
		c := *n
		c.nlink = 1
		if n.isDir() {
			c.nlink = 2 // its name (or, for the root, its "..") and its "."
			c.entries, c.durEntries = cloneEntries(n.durEntries), cloneEntries(n.durEntries)
			c.data, c.durable = nil, nil
		} else {
			c.data, c.durable = slices.Clone(n.durable), slices.Clone(n.durable)
		}
		out.nodes[ino] = &c
		for _, child := range n.durEntries {
			walk(child)
			if m.nodes[child].isDir() {
				c.nlink++ // the child's ".."
			}
		}
	}
	walk(rootIno)
	return out
}

func cloneEntries(e map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(e))
	for k, v := range e {
		out[k] = v
	}
	return out
}

// Image is the durable state of a file system: what a machine finds on its disk after a power
// cut. It is immutable.
type Image struct{ m *model }

// EmptyImage is a file system with an empty root directory.
func EmptyImage() *Image { return &Image{m: newModel()} }

// lookup returns the inode at a slash-separated path relative to the root.
func (img *Image) lookup(name string) (*node, error) {
	n := img.m.nodes[rootIno]
	for _, part := range strings.Split(filepath.ToSlash(filepath.Clean(name)), "/") {
		if part == "." || part == "" {
			continue
		}
		if !n.isDir() {
			return nil, fmt.Errorf("%s: %w", name, syscall.ENOTDIR)
		}
		ino, ok := n.entries[part]
		if !ok {
			return nil, fmt.Errorf("%s: %w", name, os.ErrNotExist)
		}
		n = img.m.nodes[ino]
	}
	return n, nil
}

// ReadFile returns the content of the regular file at name (relative to the root).
func (img *Image) ReadFile(name string) ([]byte, error) {
	n, err := img.lookup(name)
	if err != nil {
		return nil, err
	}
	if n.mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	return slices.Clone(n.data), nil
}

// Names returns the sorted names in the directory dir (relative to the root).
func (img *Image) Names(dir string) ([]string, error) {
	n, err := img.lookup(dir)
	if err != nil {
		return nil, err
	}
	if !n.isDir() {
		return nil, fmt.Errorf("%s: %w", dir, syscall.ENOTDIR)
	}
	names := make([]string, 0, len(n.entries))
	for name := range n.entries {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// WriteTo recreates the image's tree inside the existing directory dir on an ordinary file
// system: directories, regular files (hard links as links), symlinks and unix socket files
// (which, as after a reboot, nothing listens on). Modes are kept; owners are not.
func (img *Image) WriteTo(dir string) error {
	paths := map[uint64]string{}
	var walk func(n *node, path string) error
	walk = func(n *node, path string) error {
		names := make([]string, 0, len(n.entries))
		for name := range n.entries {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			c := img.m.nodes[n.entries[name]]
			p := filepath.Join(path, name)
			if first, ok := paths[c.ino]; ok && !c.isDir() {
				if err := os.Link(first, p); err != nil {
					return err
				}
				continue
			}
			paths[c.ino] = p
			perm := os.FileMode(c.mode & 0o7777)
			var err error
			switch c.mode & syscall.S_IFMT {
			case syscall.S_IFDIR:
				if err = os.Mkdir(p, perm); err == nil {
					err = walk(c, p)
				}
			case syscall.S_IFREG:
				err = os.WriteFile(p, c.data, perm)
				if err == nil {
					err = os.Chmod(p, perm)
				}
			case syscall.S_IFLNK:
				err = os.Symlink(string(c.data), p)
			default:
				err = unix.Mknod(p, c.mode, 0)
			}
			if err != nil {
				return fmt.Errorf("writing the image: %w", err)
			}
		}
		return nil
	}
	if _, err := os.Stat(dir); err != nil {
		return err
	}
	return walk(img.m.nodes[rootIno], dir)
}

// ImageOf reads the tree under dir on an ordinary file system into an image, every part of it
// durable: a starting state for Mount.
func ImageOf(dir string) (*Image, error) {
	m := newModel()
	inos := map[[2]uint64]uint64{} // hard links: (dev, ino) to the model's inode
	var walk func(parent *node, path string) error
	walk = func(parent *node, path string) error {
		ents, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := filepath.Join(path, e.Name())
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return err
			}
			mode := uint32(st.Mode) // uint16 on some systems
			if ino, ok := inos[[2]uint64{uint64(st.Dev), st.Ino}]; ok && mode&syscall.S_IFMT != syscall.S_IFDIR {
				parent.entries[e.Name()] = ino
				m.nodes[ino].nlink++
				continue
			}
			n := m.add(mode, st.Uid, st.Gid, e.Name())
			inos[[2]uint64{uint64(st.Dev), st.Ino}] = n.ino
			parent.entries[e.Name()] = n.ino
			n.nlink++
			switch mode & syscall.S_IFMT {
			case syscall.S_IFDIR:
				parent.nlink++
				err = walk(n, p)
			case syscall.S_IFREG:
				n.data, err = os.ReadFile(p)
			case syscall.S_IFLNK:
				var target string
				target, err = os.Readlink(p)
				n.data = []byte(target)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(m.nodes[rootIno], dir); err != nil {
		return nil, fmt.Errorf("reading %s into an image: %w", dir, err)
	}
	m.syncAll()
	return &Image{m: m}, nil
}

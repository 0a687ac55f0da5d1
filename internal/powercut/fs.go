package powercut

import (
	"fmt"
	"slices"
	"sort"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// rawFS serves the model over FUSE. Every call takes the FS's mutex, so the model sees one
// call at a time. Calls that change what a cut would leave or what the running system sees
// (writes, truncation, names, syncs) are the counted ops; the rest (lookups, reads, stats,
// opens and closes) change nothing a cut could lose, so a cut between them equals a cut after
// the op before them.
type rawFS struct {
	fuse.RawFileSystem
	fs *FS
}

func (r *rawFS) String() string { return "powercut" }

// node returns the inode id names, or nil once the power is cut.
func (r *rawFS) node(id uint64) *node {
	if r.fs.cut {
		return nil
	}
	return r.fs.m.nodes[id]
}

func (r *rawFS) dir(id uint64) (*node, fuse.Status) {
	n := r.node(id)
	switch {
	case n == nil:
		return nil, fuse.EIO
	case !n.isDir():
		return nil, fuse.ENOTDIR
	}
	return n, fuse.OK
}

func fillAttr(n *node, a *fuse.Attr) {
	a.Ino = n.ino
	a.Size = uint64(len(n.data))
	a.Blocks = (a.Size + 511) / 512
	a.Mode = n.mode
	a.Nlink = n.nlink
	a.Uid, a.Gid = n.uid, n.gid
	a.Blksize = 4096
	a.SetTimes(&n.atime, &n.mtime, &n.ctime)
}

func fillEntry(n *node, out *fuse.EntryOut) {
	out.NodeId = n.ino
	fillAttr(n, &out.Attr)
}

func (r *rawFS) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	r.fs.mu.Lock()
	defer r.fs.mu.Unlock()
	d, st := r.dir(h.NodeId)
	if !st.Ok() {
		return st
	}
	ino, ok := d.entries[name]
	if !ok {
		return fuse.ENOENT
	}
	fillEntry(r.fs.m.nodes[ino], out)
	return fuse.OK
}

func (r *rawFS) Forget(uint64, uint64) {}

func (r *rawFS) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	r.fs.mu.Lock()
	defer r.fs.mu.Unlock()
	n := r.node(in.NodeId)
	if n == nil {
		return fuse.EIO
	}
	fillAttr(n, &out.Attr)
	return fuse.OK
}

func (r *rawFS) SetAttr(_ <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	return r.fs.op(func() (string, fuse.Status) {
		n := r.node(in.NodeId)
		if n == nil {
			return "", fuse.EIO
		}
		now := time.Now()
		desc := "setattr " + n.name
		if mode, ok := in.GetMode(); ok {
			n.mode = n.mode&syscall.S_IFMT | mode&0o7777
			desc += fmt.Sprintf(" mode %o", mode&0o7777)
		}
		if uid, ok := in.GetUID(); ok {
			n.uid = uid
		}
		if gid, ok := in.GetGID(); ok {
			n.gid = gid
		}
		if size, ok := in.GetSize(); ok {
			if n.isDir() {
				return "", fuse.Status(syscall.EISDIR)
			}
			n.data = resize(n.data, int(size))
			n.mtime = now
			desc += fmt.Sprintf(" size %d", size)
		}
		if t, ok := in.GetATime(); ok {
			n.atime = t
		}
		if t, ok := in.GetMTime(); ok {
			n.mtime = t
		}
		n.ctime = now
		fillAttr(n, &out.Attr)
		return desc, fuse.OK
	})
}

func resize(b []byte, size int) []byte {
	if size <= len(b) {
		return b[:size]
	}
	return append(b, make([]byte, size-len(b))...)
}

// link names child name in dir, replacing nothing (callers check the name is free).
func link(dir *node, name string, child *node) {
	dir.entries[name] = child.ino
	child.nlink++
	child.name = name
	if child.isDir() {
		dir.nlink++
	}
	dir.mtime, dir.ctime = time.Now(), time.Now()
}

// unlink removes name from dir.
func (r *rawFS) unlink(dir *node, name string) {
	child := r.fs.m.nodes[dir.entries[name]]
	delete(dir.entries, name)
	child.nlink--
	if child.isDir() {
		child.nlink-- // its "."
		dir.nlink--
	}
	child.ctime = time.Now()
	dir.mtime, dir.ctime = time.Now(), time.Now()
}

// create makes a new inode named name in the directory parent.
func (r *rawFS) create(h *fuse.InHeader, name string, mode uint32, out *fuse.EntryOut) (string, fuse.Status) {
	d, st := r.dir(h.NodeId)
	if !st.Ok() {
		return "", st
	}
	if _, ok := d.entries[name]; ok {
		return "", fuse.Status(syscall.EEXIST)
	}
	n := r.fs.m.add(mode, h.Uid, h.Gid, name)
	link(d, name, n)
	fillEntry(n, out)
	return fmt.Sprintf("create %s mode %o", name, mode), fuse.OK
}

func (r *rawFS) Mknod(_ <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	return r.fs.op(func() (string, fuse.Status) { return r.create(&in.InHeader, name, in.Mode, out) })
}

func (r *rawFS) Mkdir(_ <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return r.fs.op(func() (string, fuse.Status) {
		return r.create(&in.InHeader, name, syscall.S_IFDIR|in.Mode&0o7777, out)
	})
}

func (r *rawFS) Symlink(_ <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	return r.fs.op(func() (string, fuse.Status) {
		desc, st := r.create(h, name, syscall.S_IFLNK|0o777, out)
		if st.Ok() {
			n := r.fs.m.nodes[out.NodeId]
			n.data, n.durable = []byte(target), []byte(target)
			fillEntry(n, out)
		}
		return desc, st
	})
}

func (r *rawFS) Readlink(_ <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	r.fs.mu.Lock()
	defer r.fs.mu.Unlock()
	n := r.node(h.NodeId)
	if n == nil {
		return nil, fuse.EIO
	}
	return slices.Clone(n.data), fuse.OK
}

func (r *rawFS) Create(_ <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return r.fs.op(func() (string, fuse.Status) {
		return r.create(&in.InHeader, name, syscall.S_IFREG|in.Mode&0o7777, &out.EntryOut)
	})
}

func (r *rawFS) Unlink(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return r.fs.op(func() (string, fuse.Status) { return r.remove(h, name, false) })
}

func (r *rawFS) Rmdir(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return r.fs.op(func() (string, fuse.Status) { return r.remove(h, name, true) })
}

func (r *rawFS) remove(h *fuse.InHeader, name string, dir bool) (string, fuse.Status) {
	d, st := r.dir(h.NodeId)
	if !st.Ok() {
		return "", st
	}
	ino, ok := d.entries[name]
	if !ok {
		return "", fuse.ENOENT
	}
	child := r.fs.m.nodes[ino]
	switch {
	case dir && !child.isDir():
		return "", fuse.ENOTDIR
	case !dir && child.isDir():
		return "", fuse.Status(syscall.EISDIR)
	case dir && len(child.entries) > 0:
		return "", fuse.Status(syscall.ENOTEMPTY)
	}
	r.unlink(d, name)
	if dir {
		return "rmdir " + name, fuse.OK
	}
	return "unlink " + name, fuse.OK
}

// renameExchange and renameNoReplace are renameat2's flags.
const (
	renameNoReplace = 1 << 0
	renameExchange  = 1 << 1
)

func (r *rawFS) Rename(_ <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	return r.fs.op(func() (string, fuse.Status) {
		src, st := r.dir(in.NodeId)
		if !st.Ok() {
			return "", st
		}
		dst, st := r.dir(in.Newdir)
		if !st.Ok() {
			return "", st
		}
		ino, ok := src.entries[oldName]
		if !ok {
			return "", fuse.ENOENT
		}
		moving := r.fs.m.nodes[ino]
		target, exists := dst.entries[newName]
		switch {
		case in.Flags&^(renameNoReplace|renameExchange) != 0 || in.Flags == renameNoReplace|renameExchange:
			return "", fuse.EINVAL
		case in.Flags&renameExchange != 0:
			if !exists {
				return "", fuse.ENOENT
			}
			other := r.fs.m.nodes[target]
			src.entries[oldName], dst.entries[newName] = target, ino
			moving.name, other.name = newName, oldName
			if moving.isDir() != other.isDir() && src != dst {
				if moving.isDir() {
					src.nlink--
					dst.nlink++
				} else {
					src.nlink++
					dst.nlink--
				}
			}
			now := time.Now()
			moving.ctime, other.ctime, src.mtime, dst.mtime = now, now, now, now
			return fmt.Sprintf("rename exchange %s %s", oldName, newName), fuse.OK
		case exists && in.Flags&renameNoReplace != 0:
			return "", fuse.Status(syscall.EEXIST)
		case exists && target == ino:
			return "rename " + oldName + " onto itself", fuse.OK
		case exists:
			old := r.fs.m.nodes[target]
			if old.isDir() != moving.isDir() {
				if old.isDir() {
					return "", fuse.Status(syscall.EISDIR)
				}
				return "", fuse.ENOTDIR
			}
			if old.isDir() && len(old.entries) > 0 {
				return "", fuse.Status(syscall.ENOTEMPTY)
			}
			r.unlink(dst, newName)
		}
		delete(src.entries, oldName)
		dst.entries[newName] = ino
		if moving.isDir() {
			src.nlink--
			dst.nlink++
		}
		now := time.Now()
		moving.name, moving.ctime = newName, now
		src.mtime, src.ctime, dst.mtime, dst.ctime = now, now, now, now
		return fmt.Sprintf("rename %s %s", oldName, newName), fuse.OK
	})
}

func (r *rawFS) Link(_ <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	return r.fs.op(func() (string, fuse.Status) {
		d, st := r.dir(in.NodeId)
		if !st.Ok() {
			return "", st
		}
		n := r.node(in.Oldnodeid)
		switch {
		case n == nil:
			return "", fuse.EIO
		case n.isDir():
			return "", fuse.EPERM
		}
		if _, ok := d.entries[name]; ok {
			return "", fuse.Status(syscall.EEXIST)
		}
		link(d, name, n)
		n.ctime = time.Now()
		fillEntry(n, out)
		return "link " + name, fuse.OK
	})
}

func (r *rawFS) Access(<-chan struct{}, *fuse.AccessIn) fuse.Status { return fuse.OK }

func (r *rawFS) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if in.Flags&syscall.O_TRUNC == 0 {
		r.fs.mu.Lock()
		defer r.fs.mu.Unlock()
		if r.node(in.NodeId) == nil {
			return fuse.EIO
		}
		return fuse.OK
	}
	return r.fs.op(func() (string, fuse.Status) {
		n := r.node(in.NodeId)
		if n == nil {
			return "", fuse.EIO
		}
		n.data = n.data[:0]
		n.mtime, n.ctime = time.Now(), time.Now()
		return "truncate " + n.name, fuse.OK
	})
}

func (r *rawFS) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	r.fs.mu.Lock()
	defer r.fs.mu.Unlock()
	n := r.node(in.NodeId)
	if n == nil {
		return nil, fuse.EIO
	}
	if in.Offset >= uint64(len(n.data)) {
		return fuse.ReadResultData(nil), fuse.OK
	}
	k := copy(buf, n.data[in.Offset:])
	return fuse.ReadResultData(buf[:k]), fuse.OK
}

func (r *rawFS) Write(_ <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	st := r.fs.op(func() (string, fuse.Status) {
		n := r.node(in.NodeId)
		if n == nil {
			return "", fuse.EIO
		}
		end := int(in.Offset) + len(data)
		if end > len(n.data) {
			n.data = resize(n.data, end)
		}
		copy(n.data[in.Offset:], data)
		n.mtime, n.ctime = time.Now(), time.Now()
		return fmt.Sprintf("write %s [%d,%d)", n.name, in.Offset, end), fuse.OK
	})
	if !st.Ok() {
		return 0, st
	}
	return uint32(len(data)), fuse.OK
}

func (r *rawFS) Flush(<-chan struct{}, *fuse.FlushIn) fuse.Status { return fuse.OK }
func (r *rawFS) Release(<-chan struct{}, *fuse.ReleaseIn)         {}
func (r *rawFS) ReleaseDir(*fuse.ReleaseIn)                       {}

// Fsync makes a file's content durable (fsync and fdatasync alike: the model keeps no
// metadata a cut could lose apart from names).
func (r *rawFS) Fsync(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return r.fs.op(func() (string, fuse.Status) {
		n := r.node(in.NodeId)
		if n == nil {
			return "", fuse.EIO
		}
		if n.isDir() {
			r.syncDir(n)
			return "fsync dir " + n.name, fuse.OK
		}
		if !r.fs.dropFileSyncs {
			n.durable = slices.Clone(n.data)
		}
		return "fsync " + n.name, fuse.OK
	})
}

func (r *rawFS) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, _ *fuse.OpenOut) fuse.Status {
	r.fs.mu.Lock()
	defer r.fs.mu.Unlock()
	_, st := r.dir(in.NodeId)
	return st
}

// ReadDir lists the names in order, "." and ".." first; the offset is the index of the next.
func (r *rawFS) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	r.fs.mu.Lock()
	defer r.fs.mu.Unlock()
	d, st := r.dir(in.NodeId)
	if !st.Ok() {
		return st
	}
	list := []fuse.DirEntry{{Name: ".", Mode: syscall.S_IFDIR, Ino: d.ino}, {Name: "..", Mode: syscall.S_IFDIR, Ino: rootIno}}
	names := make([]string, 0, len(d.entries))
	for name := range d.entries {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := r.fs.m.nodes[d.entries[name]]
		list = append(list, fuse.DirEntry{Name: name, Mode: c.mode, Ino: c.ino})
	}
	for i := int(in.Offset); i < len(list); i++ {
		list[i].Off = uint64(i + 1)
		if !out.AddDirEntry(list[i]) {
			break
		}
	}
	return fuse.OK
}

// FsyncDir makes a directory's names durable: a cut leaves exactly the names it has now.
func (r *rawFS) FsyncDir(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return r.fs.op(func() (string, fuse.Status) {
		d, st := r.dir(in.NodeId)
		if !st.Ok() {
			return "", st
		}
		r.syncDir(d)
		if d.ino == rootIno {
			return "fsync dir /", fuse.OK
		}
		return "fsync dir " + d.name, fuse.OK
	})
}

// syncDir makes d's names durable, unless the FS drops directory syncs.
func (r *rawFS) syncDir(d *node) {
	if !r.fs.dropDirSyncs {
		d.durEntries = cloneEntries(d.entries)
	}
}

func (r *rawFS) StatFs(_ <-chan struct{}, _ *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	out.Bsize, out.Frsize, out.NameLen = 4096, 4096, 255
	out.Blocks, out.Bfree, out.Bavail = 1<<20, 1<<19, 1<<19
	out.Files, out.Ffree = 1<<20, 1<<19
	return fuse.OK
}

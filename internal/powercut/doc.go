// Package powercut is a test file system that loses, on a power cut, exactly what a disk may
// lose: like Jepsen's LazyFS, it holds every write and every change of names until a sync
// makes it durable, and a cut drops whatever is not.
//
// The file system is served over FUSE from an in-memory model of inodes. Each regular file
// has the content the running system sees and its durable content, which an fsync or
// fdatasync of the file sets to the current one. Each directory has its current names and its
// durable names, which an fsync of the directory sets to the current ones; creating, renaming
// (renameat2's RENAME_EXCHANGE and RENAME_NOREPLACE included), linking and unlinking change
// only the current names. A cut leaves the inodes reachable from the root by durable names,
// each with its durable content: a file whose name was synced but whose content never was is
// empty, a rename whose directory was not synced never happened, an unlink not synced is
// undone. This is the strict reading of POSIX that careful programs are written against; a
// journalling file system such as ext4 usually commits names within seconds, so it loses less
// in practice, but promises no more.
//
// By default a cut keeps no unsynced write; with FS.WriteBackAtCut it keeps them all (the
// kernel wrote every dirty page back just before the power went), which makes a file
// overwritten in place, cut between two of its writes, the torn file a disk may hold. The
// truth on a real disk lies between the two; a test that passes under both at every op
// boundary holds whichever pages were written back, as long as whole writes reach the disk
// in order within a file.
//
// Tests mount it (Mount), run the code under test on it, and either cut at once (Cut) or arm a
// cut after the n-th counted op (CutAfter). The counted ops are those that change what the
// running system sees or what a cut leaves: writes, truncations, creations, renames, links,
// unlinks and fsyncs of files and directories. Lookups, reads, stats, opens and closes are
// not counted: a cut between them leaves what a cut after the op before them leaves. After the
// cut every call fails with EIO, as a dead machine's would, so the code under test stops
// where the cut caught it. The Image a cut returns is the disk after the reboot: mount it
// again, or write it into an ordinary directory (Image.WriteTo) and restart the code there.
//
// File modes, owners and times are kept but not modelled as losable; neither are extended
// attributes (not supported) or locks (flock and fcntl locks are the kernel's own, per
// mount). Mounting needs /dev/fuse (Available says why not) and, unless the caller is root,
// fusermount3.
package powercut

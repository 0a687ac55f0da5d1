package checkpoint

// fileContent is what a Store knows a file it wrote holds: the entries of the Prepared it was
// written from, in file order, and the file's identity as the Store last saw it. A later write
// checks the identity before it trusts the entries (see sharedPrefix and replaceViaSpare).
type fileContent struct {
	entries []*Entry
	id      fileID
}

// fileID is what a Store compares to decide that a file is still the one it wrote: the same
// inode, size, modification time and, once set, change time. Writing into the file, truncating
// it, putting another file at its name or changing its times, mode or owner changes one of
// them, as long as the file system's timestamps tell the change from the Store's own last
// look at the file: since Linux 6.13 (multigrain timestamps on ext4, xfs, btrfs and tmpfs) a
// change after the Store read the times always does. On older kernels a change that keeps the
// size, made within one clock tick of the Store's write, is not seen; only a process writing
// in place into one of the Store's own 0600 files can make one, and the checkpoint it leads to
// fails its checksum when read.
type fileID struct {
	dev, ino         uint64
	size             int64
	mtimeNs, ctimeNs int64
	ctimeKnown       bool
}

// sharedPrefix returns how many leading bytes a Prepared file made of next shares with the
// file made of prev, judged from the entries alone: the file head and every entry up to the
// first one that is not the same Entry. The bytes after those entries (a comma or the closing
// bracket, the registered devices and the checksum) may differ, so they are not counted.
// Entries never change and each keeps the text it was first encoded to, so two files that
// start with the same Entries start with the same bytes. A nil list (written as null) shares
// nothing with anything.
func sharedPrefix(prev, next []*Entry) int64 {
	if prev == nil || next == nil {
		return 0
	}
	n := int64(len(jsonFileHead) + 1) // the head and the opening bracket
	for i := range min(len(prev), len(next)) {
		if prev[i] != next[i] {
			break
		}
		if i > 0 {
			n++ // the comma before it
		}
		n += int64(len(next[i].encoded().json))
	}
	return n
}

//go:build !linux

package checkpoint

// heldFile is a reference to the file a write is about to replace. Only Linux takes one.
type heldFile struct{ size int64 }

func (h *heldFile) release() {}

// holdFile takes no reference outside Linux: the replaced file is freed by the rename.
func holdFile(string) *heldFile { return nil }

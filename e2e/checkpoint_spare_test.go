package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kdm-project/kdm/checkpoint"
)

// TestHostileSpare: while kdm is down, something else is put at the name of the file its
// checkpoint writes reuse (checkpoint.SpareFileName): a symlink to a file elsewhere, or a
// second name of such a file. The restarted kdm writes its checkpoints around it: the other
// file keeps its content, the running pod keeps its GPUs, the next pod gets only free ones,
// and the checkpoint holds both.
func TestHostileSpare(t *testing.T) {
	plants := map[string]func(victim, spare string) error{
		"symlink":   func(victim, spare string) error { return os.Symlink(victim, spare) },
		"hard link": func(victim, spare string) error { return os.Link(victim, spare) },
	}
	for _, policy := range policies {
		for name, plant := range plants {
			t.Run(policy+"/"+name, func(t *testing.T) {
				n := newNode(t)
				victim := filepath.Join(n.base, "victim")
				if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				kdm := n.startWithGPUs(policy)
				held := map[string][]string{"a": n.admit("a", 3)}
				kdm.kill()

				spare := filepath.Join(n.pluginDir, checkpoint.SpareFileName)
				if err := os.RemoveAll(spare); err != nil {
					t.Fatal(err)
				}
				if err := plant(victim, spare); err != nil {
					t.Fatal(err)
				}
				kdm = n.restartKeeping(policy, held, "b", 4)
				n.expectCheckpointHolds(held)
				kdm.terminate(t)

				if got, err := os.ReadFile(victim); err != nil || string(got) != "precious\n" {
					t.Fatalf("the file the spare's name led to was written: %d bytes, starting %.40q (%v)", len(got), got, err)
				}
				if fi, err := os.Lstat(spare); err != nil || (name == "symlink") != (fi.Mode()&os.ModeSymlink != 0) {
					t.Fatalf("what was planted at the spare's name is gone or changed: %v (%v)", fi, err)
				}
			})
		}
	}
}

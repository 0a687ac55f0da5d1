package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kdm-project/kdm/agent"
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
				kdm := n.startKdm("--policy", policy)
				n.startPlugin()
				n.eventually("8 GPUs", gpus(8))
				n.writePod("a", 3)
				st := n.eventually("a admitted", func(st agent.NodeStatus) bool { return len(visible(pod(st, "a"))) == 3 })
				held := map[string][]string{"a": sorted(visible(pod(st, "a")))}
				kdm.kill()

				spare := filepath.Join(n.pluginDir, checkpoint.SpareFileName)
				if err := os.RemoveAll(spare); err != nil {
					t.Fatal(err)
				}
				if err := plant(victim, spare); err != nil {
					t.Fatal(err)
				}
				kdm = n.startKdm("--policy", policy)
				n.eventually("plugin back after the restart", gpus(8))
				n.expectHolding(held)
				n.writePod("b", 4)
				st = n.eventually("b admitted", func(st agent.NodeStatus) bool { return len(visible(pod(st, "b"))) == 4 })
				held["b"] = sorted(visible(pod(st, "b")))
				disjointSets(t, held)
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

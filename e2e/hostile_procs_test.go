package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kdm-project/kdm/internal/testbin"
)

// hostileBinary builds testdata/hostile once into binDir, beside kdm.
var hostileBinary = sync.OnceValue(func() error {
	dir, err := testbin.Build("kdm-e2e-hostile", map[string]string{"hostile": "./testdata/hostile"})
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	return os.Rename(filepath.Join(dir, "hostile"), filepath.Join(binDir, "hostile"))
})

// startHostile starts one hostile process (testdata/hostile) with args; it is killed at the
// test's cleanup like every process the node starts.
func (n *node) startHostile(args ...string) *process {
	n.t.Helper()
	if err := hostileBinary(); err != nil {
		n.t.Fatalf("building the hostile client: %v", err)
	}
	return n.start("hostile", args...)
}

// waitHeld waits until every process has printed "held" (its attack is in place), for at
// most limit, and fails the test naming how many had not.
func waitHeld(t *testing.T, procs []*process, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		waiting := 0
		for _, p := range procs {
			b, _ := os.ReadFile(p.log)
			if !bytes.Contains(b, []byte("held\n")) {
				waiting++
			}
		}
		if waiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d hostile processes were not in place within %v", waiting, len(procs), limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stillRunning fails the test if any of procs has exited.
func stillRunning(t *testing.T, procs []*process) {
	t.Helper()
	for _, p := range procs {
		select {
		case <-p.done:
			t.Fatalf("hostile process %d exited early: %v", p.cmd.Process.Pid, p.cmd.ProcessState)
		default:
		}
	}
}

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
)

// maxStartRSS bounds kdm's peak resident memory through a start that meets the hostile results
// directory below. An idle kdm runs in about 70 MB; the results a start may read
// (podresult.MaxScanBytes) add at most a few times their 16 MiB. Reading every planted file,
// as kdm did when a result could be 4 MiB, takes over a gigabyte.
const maxStartRSS = 400 << 20

// TestBigPodResults: while kdm is down, the results directory is filled with 300 admitted-looking
// results just under 4 MiB, 40 just under podresult.MaxFileSize, and small hostile files (not
// JSON, nested past the decoder's depth, a FIFO, a symbolic link), and the checkpoint is
// removed, so that the running pod's devices can only come back from its own small result.
// kdm starts, restores that pod with its GPUs, admits the next pod on free GPUs, logs a reason
// for every file it refuses, and never grows past maxStartRSS.
func TestBigPodResults(t *testing.T) {
	innerLoopSkips(t, "fills a results directory with 1.2 GB of files")
	hostile := plantHostileResults(t)
	for _, policy := range devicemanager.PolicyNames() {
		t.Run(policy, func(t *testing.T) {
			n := newNode(t)
			kdm := n.startWithGPUs(policy)
			held := map[string][]string{"a": n.admit("a", 2)}
			kdm.kill()
			if err := os.Remove(filepath.Join(n.pluginDir, checkpoint.FileName)); err != nil {
				t.Fatal(err)
			}
			linkAll(t, hostile, resultsDir(n.rootDir))

			kdm = n.restartKeeping(policy, held, "b", 2)
			rss := peakRSS(t, kdm)
			t.Logf("kdm's peak resident memory: %d MiB", rss>>20)
			if rss > maxStartRSS {
				t.Fatalf("kdm's peak resident memory is %d MiB, more than %d MiB", rss>>20, maxStartRSS>>20)
			}
			log, err := os.ReadFile(kdm.log)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				fmt.Sprintf("more than the %d a result may have", podresult.MaxFileSize),
				"not read: the results read before it took",
				"garbage.json", "nested.json", "fifo.json: not a regular file", "link.json",
			} {
				if !strings.Contains(string(log), want) {
					t.Errorf("kdm's log does not say %q about a refused result", want)
				}
			}
			if refused := strings.Count(string(log), "Skipped a pod result that cannot be used"); refused < 300 {
				t.Errorf("kdm logged %d refused results, want one line for each of the 300 big ones at least", refused)
			}
			kdm.terminate(t)
		})
	}
}

// plantHostileResults writes the hostile files once, into a directory of their own, for
// linkAll to give each node.
func plantHostileResults(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	padded := func(name string, size int) []byte {
		head := fmt.Sprintf(`{"namespace":"e2e","name":%q,"uid":"uid-%s","phase":"Admitted","message":"`, name, name)
		return []byte(head + strings.Repeat("A", size-len(head)-2) + `"}`)
	}
	for i := range 300 {
		name := "big-" + strconv.Itoa(i)
		write(name+".json", padded(name, 4<<20-1024))
	}
	for i := range 40 {
		name := "near-" + strconv.Itoa(i)
		write(name+".json", padded(name, podresult.MaxFileSize-1024))
	}
	write("garbage.json", []byte("{not json"))
	write("nested.json", []byte(strings.Repeat("[", 100000)))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// linkAll gives to every entry of from a name in to: a hard link for a regular file, an equal
// FIFO or symbolic link otherwise.
func linkAll(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		src, dst := filepath.Join(from, e.Name()), filepath.Join(to, e.Name())
		switch {
		case e.Type().IsRegular():
			err = os.Link(src, dst)
		case e.Type()&os.ModeNamedPipe != 0:
			err = syscall.Mkfifo(dst, 0o600)
		default:
			var target string
			if target, err = os.Readlink(src); err == nil {
				err = os.Symlink(target, dst)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// peakRSS is the process's peak resident memory (VmHWM) in bytes.
func peakRSS(t *testing.T, p *process) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", p.cmd.Process.Pid)
	return 0
}

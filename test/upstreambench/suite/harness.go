package suite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	stub "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

// KubeletSocketName is the registration socket's name in the plugin directory.
var KubeletSocketName = filepath.Base(pluginapi.KubeletSocket)

// CheckpointFile is the checkpoint's name in the plugin directory (the kubelet's checkpoint
// key).
const CheckpointFile = "kubelet_internal_checkpoint"

// Manager is what the benchmarks do with a device manager.
type Manager interface {
	// Allocate admits pod's one container.
	Allocate(pod *v1.Pod) error
	// Allocatable is ResourceName's allocatable count, as the node status would publish it.
	Allocatable() int64
	// Devices are the device IDs pod's container holds, sorted.
	Devices(pod *v1.Pod) []string
	// Updated receives a value after the manager announced a device-health update for pods
	// (its Updates channel, which the kubelet's pod workers read); values do not queue up:
	// one stands for any number of updates since the last receive.
	Updated() <-chan struct{}
	// AllocatableOf is resource's allocatable count.
	AllocatableOf(resource string) int64
	// Settle returns once the checkpoint write that follows the device list last received
	// has reached the disk, where before is the checkpoint's identity from before that list
	// was sent. Called once the list shows in Allocatable, it keeps the write out of whatever
	// is timed next.
	Settle(tb testing.TB, before FileID)
	// Stop stops the manager and waits for its goroutines; a second call does nothing.
	Stop()
}

// Side is one device manager under comparison.
type Side struct {
	// Name is its sub-benchmark's name: a kubelet row's policy name, "kdm", "kdm,policy=kdm".
	Name string
	// Kubelet marks the kubelet's own manager, which sits out the sizes where it takes about
	// a second per op.
	Kubelet bool
	// Launch starts the manager on the plugin directory dir with pods as its pod source
	// (always ready), restoring dir's checkpoint if there is one, and leaves it running.
	Launch func(tb testing.TB, dir string, pods *PodList) Manager
}

// Start launches s's manager and stops it at tb's cleanup.
func (s Side) Start(tb testing.TB, dir string, pods *PodList) Manager {
	m := s.Launch(tb, dir, pods)
	tb.Cleanup(m.Stop)
	return m
}

// AllSourcesReady tells the kubelet's manager that every pod source has synced, so that its
// garbage collection runs (the kubelet's config.SourcesReady).
type AllSourcesReady struct{}

func (AllSourcesReady) AddSource(string) {}
func (AllSourcesReady) AllReady() bool   { return true }

// ShortDir is a fresh directory with a path short enough for unix socket names
// (t.TempDir's can exceed the 108-byte limit under a long benchmark name).
func ShortDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "ub")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// SeedCheckpoint writes d as dir's checkpoint with the kubelet's checkpoint manager, for a
// manager to restore. Every side reads the same bytes (upstreambench's
// TestSameCheckpointBytes checks that kdm would write them too).
func SeedCheckpoint(tb testing.TB, dir string, d *Checkpoint) {
	tb.Helper()
	cm, err := checkpointmanager.NewCheckpointManager(dir)
	if err != nil {
		tb.Fatal(err)
	}
	if err := cm.CreateCheckpoint(CheckpointFile, d.Kubelet()); err != nil {
		tb.Fatal(err)
	}
}

// Updates reads a manager's health updates until stopped, as the kubelet's pod workers do (a
// manager may block on an unread channel), and signals each on Signal.
type Updates struct {
	signal chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// WatchUpdates starts reading updates.
func WatchUpdates[T any](updates <-chan T) *Updates {
	ctx, cancel := context.WithCancel(context.Background())
	u := &Updates{signal: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(u.done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-updates:
				select {
				case u.signal <- struct{}{}:
				default: // one is pending: it stands for this one too
				}
			}
		}
	}()
	return u
}

// Signal is the channel Manager.Updated returns.
func (u *Updates) Signal() <-chan struct{} { return u.signal }

// Stop stops reading and waits for the reader; a second call does nothing.
func (u *Updates) Stop() {
	u.cancel()
	<-u.done
}

// Stopped reports whether Stop was called.
func (u *Updates) Stopped() bool {
	select {
	case <-u.done:
		return true
	default:
		return false
	}
}

// FileID tells one file at a path from another: the kubelet replaces its checkpoint with a
// new file, kdm exchanges it with its spare, so a write changes the inode at the name; the
// size and modification time tell a write into the same file.
type FileID struct {
	Ino   uint64
	Size  int64
	Mtime time.Time
}

// CheckpointID is the identity of dir's checkpoint, the zero FileID when there is none.
func CheckpointID(tb testing.TB, dir string) FileID {
	tb.Helper()
	fi, err := os.Stat(filepath.Join(dir, CheckpointFile))
	if errors.Is(err, fs.ErrNotExist) {
		return FileID{}
	}
	if err != nil {
		tb.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		tb.Fatalf("%s: no inode number on this system", fi.Name())
	}
	return FileID{Ino: st.Ino, Size: fi.Size(), Mtime: fi.ModTime()}
}

// WaitReplaced waits until dir's checkpoint is no longer the file before identifies: for a
// manager that writes the checkpoint after every device list (the kubelet's), the Settle of
// Manager. The file is looked at every 100 µs; after 30 s it fails tb.
func WaitReplaced(tb testing.TB, dir string, before FileID) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for CheckpointID(tb, dir) == before {
		if time.Now().After(deadline) {
			tb.Fatalf("the checkpoint in %s was not written within 30s", dir)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Plugin is the kubelet's own device-plugin stub serving ResourceName from a plugin
// directory, answering Allocate with ContainerResponse.
type Plugin struct {
	S   *stub.Stub
	dir string
}

// PluginSocketName is the plugin stub's socket in the plugin directory (see StartPlugin).
const PluginSocketName = "gpu.sock"

// StartPlugin starts the stub with devs on dir/PluginSocketName and registers it with the
// manager serving dir/kubelet.sock; tb's cleanup stops it. Like the kubelet's device plugins,
// the stub puts an inotify watch on dir (for a new kubelet.sock), so the kernel queues it an
// event for every file written there; the stub's watch loop (Stub.Watch) is never started,
// so after the first event none of its goroutines wakes for them.
func StartPlugin(tb testing.TB, dir string, devs []*pluginapi.Device) *Plugin {
	tb.Helper()
	s := stub.NewDevicePluginStub(logr.Discard(), devs, filepath.Join(dir, PluginSocketName), ResourceName, false, false)
	s.SetAllocFunc(allocate)
	if err := s.Start(context.Background()); err != nil {
		tb.Fatalf("starting the plugin stub: %v", err)
	}
	tb.Cleanup(func() { _ = s.Stop(logr.Discard()) })
	p := &Plugin{S: s, dir: dir}
	if err := p.register(); err != nil {
		tb.Fatal(err)
	}
	return p
}

// register registers the plugin with the manager serving kubelet.sock.
func (p *Plugin) register() error {
	if err := p.S.Register(context.Background(), filepath.Join(p.dir, KubeletSocketName), ResourceName, ""); err != nil {
		return fmt.Errorf("registering the plugin stub: %w", err)
	}
	return nil
}

// Restart is what the plugin does when it sees a new kubelet.sock: serve its socket again
// (the manager removed it at start) and register.
func (p *Plugin) Restart() error {
	if err := p.S.Restart(context.Background()); err != nil {
		return fmt.Errorf("restarting the plugin stub: %w", err)
	}
	return p.register()
}

// WaitAllocatable spins until m reports want allocatable devices, yielding between checks
// (see WaitYieldEnv). The benchmarks use it in their untimed set-ups only: a timed op ends
// with WaitUpdated, since a spinning waiter holds up the managers' own goroutines.
func WaitAllocatable(tb testing.TB, m Manager, want int64) {
	SpinUntil(tb, func() bool { return m.Allocatable() == want },
		func() string { return fmt.Sprintf("allocatable is %d after 30s, want %d", m.Allocatable(), want) })
}

// WaitUpdated waits until m announces a device-health update after which its allocatable
// count is want. It does not spin: it blocks on m.Updated and reads the count once per
// update, so it takes neither manager's lock while the manager works and adds no timer
// granularity. Both managers announce a list's health changes right after they apply it,
// before they write the checkpoint. After 30 s without it, it fails tb.
func WaitUpdated(tb testing.TB, m Manager, want int64) {
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case <-m.Updated():
			if m.Allocatable() == want {
				return
			}
		case <-deadline.C:
			tb.Fatalf("allocatable is %d after 30s of health updates, want %d", m.Allocatable(), want)
		}
	}
}

// ClearUpdated drops a pending Updated value, so that the next WaitUpdated waits for a new
// update.
func ClearUpdated(m Manager) {
	select {
	case <-m.Updated():
	default:
	}
}

// SpinUntil checks done in a loop, yielding between checks (see WaitYieldEnv), until it
// holds; after 30 s it fails the test with failure's message.
func SpinUntil(tb testing.TB, done func() bool, failure func() string) {
	var deadline time.Time
	yield := waitYield(tb)
	for i := 0; !done(); i++ {
		yield()
		if i%4096 == 0 {
			if deadline.IsZero() {
				deadline = time.Now().Add(30 * time.Second)
			} else if time.Now().After(deadline) {
				tb.Fatal(failure())
			}
		}
	}
}

// WaitYieldEnv names what the wait loop does between checks: "gosched" (the default,
// runtime.Gosched), "none" (nothing) or "sched_yield" (the system call, which yields the CPU
// to other threads but keeps the goroutine on its processor); the choice applies to every
// manager alike, and only in the untimed set-ups.
const WaitYieldEnv = "UPSTREAMBENCH_WAIT_YIELD"

// waitYield returns the wait loop's step between checks, as WaitYieldEnv selects it.
func waitYield(tb testing.TB) func() {
	switch v := os.Getenv(WaitYieldEnv); v {
	case "", "gosched":
		return runtime.Gosched
	case "none":
		return func() {}
	case "sched_yield":
		return func() { _, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
	default:
		tb.Fatalf("%s=%q: want gosched, none or sched_yield", WaitYieldEnv, v)
		return nil
	}
}

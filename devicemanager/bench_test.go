package devicemanager

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
)

// BenchmarkListAndWatchUpdate measures one device-list update end to end: the plugin sends a
// list over its ListAndWatch stream, the manager applies it and GetCapacity reflects the
// change. Under the kdm policy the checkpoint write is queued to the coalescing writer; under
// the kubelet policy it is written durably before the update counts as done.
func BenchmarkListAndWatchUpdate(b *testing.B) {
	for _, tc := range []struct {
		name   string
		n      int
		policy Policy
	}{{"devices=10", 10, KDMPolicy()}, {"devices=1000", 1000, KDMPolicy()}, {"devices=1000/policy=kubelet", 1000, KubeletPolicy()}} {
		n := tc.n
		b.Run(tc.name, func(b *testing.B) {
			dir := shortDir(b)
			m := testManager(b, dir, Config{Logger: logr.Discard(), Policy: tc.policy}, Sources{})
			devs := devices(pluginapi.Healthy, ids("dev-", n)...)
			p := testPlugin(b, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devs)
			waitFor(b, m, "devices", func() bool { return capacityIs(m, gpu, int64(n), int64(n)) })
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				want := int64(n)
				health := pluginapi.Healthy
				if i%2 == 0 {
					health, want = pluginapi.Unhealthy, int64(n-1)
				}
				m.mu.Lock()
				changed := m.deviceChange
				m.mu.Unlock()
				if err := p.SetHealth("dev-0", health); err != nil {
					b.Fatal(err)
				}
				for {
					<-changed // closed only after the checkpoint write
					if capacityIs(m, gpu, int64(n), want) {
						break
					}
					m.mu.Lock()
					changed = m.deviceChange
					m.mu.Unlock()
				}
			}
		})
	}
}

// allocatedNode starts a manager and a plugin with k+1 devices, and admits k pods holding one
// device each.
func allocatedNode(b *testing.B, k int) (*Manager, *podList) {
	b.Helper()
	dir := shortDir(b)
	pods := newPodList()
	m := testManager(b, dir, Config{Logger: logr.Discard()}, Sources{ActivePods: pods.active})
	testPlugin(b, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, ids("dev-", k+1)...), envAllocator("GPU"))
	waitFor(b, m, "devices", func() bool { return capacityIs(m, gpu, int64(k+1), int64(k+1)) })
	for i := 0; i < k; i++ {
		pod := testPod(fmt.Sprintf("pod-%d", i), container("c", map[string]int64{gpu: 1}))
		pods.add(pod)
		if err := m.Allocate(context.Background(), pod, &pod.Spec.Containers[0]); err != nil {
			b.Fatal(err)
		}
	}
	return m, pods
}

// BenchmarkAllocate measures admitting one pod with one container asking for one device, with
// K pods already allocated: the real Allocate RPC and the durable checkpoint write included.
func BenchmarkAllocate(b *testing.B) {
	for _, k := range []int{0, 100, 1000} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			m, pods := allocatedNode(b, k)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				pod := testPod(fmt.Sprintf("bench-%d", i), container("c", map[string]int64{gpu: 1}))
				pods.add(pod)
				if err := m.Allocate(ctx, pod, &pod.Spec.Containers[0]); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				pods.remove(string(pod.UID))
				m.UpdateAllocatedDevices()
				b.StartTimer()
			}
		})
	}
}

// BenchmarkAllocateAfterDeparture is BenchmarkAllocate with the previous op's pod gone from
// the active pods but not yet collected: each op's garbage collection removes it, inside the
// timed Allocate, as on a node where pods come and go. The removal and the new assignment
// reach the disk in one checkpoint write.
func BenchmarkAllocateAfterDeparture(b *testing.B) {
	for _, k := range []int{0, 1000} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			m, pods := allocatedNode(b, k)
			ctx := context.Background()
			i := 0
			for b.Loop() {
				pod := testPod(fmt.Sprintf("bench-%d", i), container("c", map[string]int64{gpu: 1}))
				pods.add(pod)
				if err := m.Allocate(ctx, pod, &pod.Spec.Containers[0]); err != nil {
					b.Fatal(err)
				}
				pods.remove(string(pod.UID))
				i++
			}
		})
	}
}

// largePluginDevices is the number of devices BenchmarkLargePlugin's plugin lists.
const largePluginDevices = 1_000_000

// largePluginEnv, set in the environment of the test binary, makes it serve
// BenchmarkLargePlugin's plugin in the directory it names instead of running tests.
const largePluginEnv = "KDM_BENCH_LARGE_PLUGIN_DIR"

// BenchmarkLargePlugin measures a plugin with 1,000,000 devices registering: from the plugin's
// start to the manager reporting all of them in capacity (the ListAndWatch message is about
// 22 MiB). Under the kubelet policy that includes the checkpoint write that follows the list
// (the manager signals the change after it); under the kdm policy the write is queued.
//
// The plugin runs in a child process (this test binary, re-executed with largePluginEnv),
// which builds its list before the timer starts and starts serving when told to, so that the
// time is the registration's and peak-MiB, this process's peak resident memory (VmHWM, reset
// at the start of each sub-benchmark where the kernel allows), is the manager's alone: the
// test binary and the manager, without the plugin's copy of the list or its encoded message.
// live-MiB is the heap still reachable once the list is applied (after a full collection):
// what the manager keeps for as long as the list is current. plugin-peak-MiB is the child's,
// for comparison.
func BenchmarkLargePlugin(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		policy Policy
	}{{"policy=kubelet", KubeletPolicy()}, {"policy=kdm", KDMPolicy()}} {
		b.Run(tc.name, func(b *testing.B) {
			// The op's manager is dropped after the op (testManager's cleanup would keep
			// every op's million devices alive until the end).
			var m *Manager
			b.Cleanup(func() {
				if m != nil {
					_ = m.Stop()
				}
			})
			resetPeakRSS()
			var pluginPeak, live int64
			for b.Loop() {
				b.StopTimer()
				dir := shortDir(b)
				m = startManager(b, Config{PluginDir: dir, Logger: logr.Discard(), Policy: tc.policy})
				p := startPluginProcess(b, exe, dir)
				b.StartTimer()
				p.serve(b)
				waitFor(b, m, "a million devices", func() bool {
					return capacityIs(m, gpu, largePluginDevices, largePluginDevices)
				})
				b.StopTimer()
				live = max(live, liveHeap())
				pluginPeak = max(pluginPeak, p.stop(b))
				_ = m.Stop()
				m = nil
				// Collect the stopped manager now: left as garbage, it would still be on the
				// heap when the next op's million devices arrive, and the peak would be that
				// of two managers.
				runtime.GC()
				b.StartTimer()
			}
			if hwm, ok := peakRSS(); ok {
				b.ReportMetric(float64(hwm)/(1<<20), "peak-MiB")
			}
			b.ReportMetric(float64(live)/(1<<20), "live-MiB")
			b.ReportMetric(float64(pluginPeak)/(1<<20), "plugin-peak-MiB")
		})
	}
}

// startManager builds and starts a manager with cfg and a registry of its own; the caller
// stops it.
func startManager(b *testing.B, cfg Config) *Manager {
	b.Helper()
	cfg.Registerer = prometheus.NewRegistry()
	m, err := New(cfg)
	if err != nil {
		b.Fatalf("New: %v", err)
	}
	if err := m.Start(context.Background(), Sources{}); err != nil {
		b.Fatalf("Start: %v", err)
	}
	return m
}

// pluginProcess is a child process serving BenchmarkLargePlugin's plugin (serveLargePlugin).
type pluginProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *bytes.Buffer
	peak   int64 // the peak resident memory the process reported
}

// startPluginProcess starts the test binary exe as the plugin of dir and returns once it has
// built its device list, before it serves or registers.
func startPluginProcess(b *testing.B, exe, dir string) *pluginProcess {
	b.Helper()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), largePluginEnv+"="+dir)
	p := &pluginProcess{cmd: cmd, stderr: &bytes.Buffer{}}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	p.stdin, p.stdout = stdin, bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.stop(b) })
	if line, err := p.stdout.ReadString('\n'); line != "ready\n" {
		b.Fatalf("plugin process did not get ready: %q, %v; stderr: %s", line, err, p.stderr)
	}
	return p
}

// serve tells the plugin process to start its plugin, which registers with the manager.
func (p *pluginProcess) serve(b *testing.B) {
	b.Helper()
	if _, err := io.WriteString(p.stdin, "serve\n"); err != nil {
		b.Fatalf("starting the plugin process's plugin: %v", err)
	}
}

// stop closes the plugin process's stdin, which makes it stop its plugin and exit, waits for
// it and returns the peak resident memory it reported, in bytes (0 if none). Its rusage
// would not do: a child started with vfork counts the parent's pages until it execs. stop
// may be called again.
func (p *pluginProcess) stop(b *testing.B) int64 {
	b.Helper()
	if p.cmd.ProcessState != nil {
		return p.peak
	}
	_ = p.stdin.Close()
	for {
		line, err := p.stdout.ReadString('\n')
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "peak "); ok {
			p.peak, _ = strconv.ParseInt(v, 10, 64)
		}
		if err != nil {
			break
		}
	}
	if err := p.cmd.Wait(); err != nil {
		b.Errorf("plugin process: %v; stderr: %s", err, p.stderr)
	}
	return p.peak
}

// serveLargePlugin is the plugin process's side of BenchmarkLargePlugin: it builds the
// device list, writes "ready" to stdout, starts the plugin in dir at the first line on stdin,
// and when stdin closes stops it, writes "peak <bytes>" (its peak resident memory) and
// returns. It returns the process's exit code.
func serveLargePlugin(dir string) int {
	p, err := deviceplugin.New(deviceplugin.Config{
		ResourceName: gpu,
		PluginDir:    dir,
		SocketName:   "gpu.sock",
		Options:      &pluginapi.DevicePluginOptions{},
		Devices:      devices(pluginapi.Healthy, ids("dev-", largePluginDevices)...),
		Logger:       logr.Discard(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	in := bufio.NewReader(os.Stdin)
	fmt.Println("ready")
	if _, err := in.ReadString('\n'); err != nil {
		return 0 // told to stop before serving
	}
	if err := p.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_, _ = io.Copy(io.Discard, in)
	p.Stop()
	if hwm, ok := peakRSS(); ok {
		fmt.Println("peak", hwm)
	}
	return 0
}

// resetPeakRSS returns the memory the Go runtime holds free to the system and resets the
// process's peak resident set size to its current size, so that a sub-benchmark's peak is
// its own. Kernels without the reset leave the peak as it was.
func resetPeakRSS() {
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// liveHeap returns the bytes of heap objects reachable now, after a full collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// peakRSS reads the process's peak resident set size from /proc/self/status.
func peakRSS() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

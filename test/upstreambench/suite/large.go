package suite

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	stub "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

// KubeletRecvLimit is the largest message the kubelet's device manager takes from a plugin:
// its gRPC client (pkg/kubelet/cm/devicemanager/plugin/v1beta1/client.go, the same in v1.36
// and v1.37) sets no receive limit, so gRPC's default for a client applies, 4 MiB. A larger
// ListAndWatch response ends the stream.
const KubeletRecvLimit = 4 << 20

// KubeletMaxDevices is the largest number of DeviceList devices whose ListAndWatch response
// fits KubeletRecvLimit: the largest plugin the kubelet accepts. Every device of DeviceList
// encodes to the same size.
func KubeletMaxDevices() int {
	return KubeletRecvLimit / proto.Size(&pluginapi.ListAndWatchResponse{Devices: DeviceList(1)})
}

// LargeDevices is the size of the largest plugin measured, for kdm alone.
const LargeDevices = 1_000_000

// LargeResource is the resource of the large plugin AllocateBeside keeps beside ResourceName.
const LargeResource = "example.com/vf"

// largeSizes are the large plugins' sizes: the largest the kubelet accepts and LargeDevices.
func largeSizes() []int { return []int{KubeletMaxDevices(), LargeDevices} }

// skipOverKubeletLimit skips a kubelet side's sub-benchmark whose plugin lists n devices,
// more than the kubelet accepts.
func skipOverKubeletLimit(b *testing.B, side Side, n int) {
	if side.Kubelet && n > KubeletMaxDevices() {
		b.Skipf("not run: a list of %d devices is over the kubelet's %d MiB gRPC receive limit", n, KubeletRecvLimit>>20)
	}
}

// listAndWatchLargeOps is listAndWatchOps with the plugin in a process of its own
// (PluginProcess), so that this process's memory is the manager's: beside ns/op it reports
// peak-MiB (this process's peak resident memory from the sub-benchmark's start: the test
// binary and the manager), live-MiB (the heap reachable after the ops, the list applied) and
// plugin-peak-MiB (the plugin process's peak).
func listAndWatchLargeOps(b *testing.B, side Side, n int) {
	resetPeakRSS()
	dir := ShortDir(b)
	pods := NewPodList()
	m := side.Start(b, dir, pods)
	before := CheckpointID(b, dir)
	p := StartPluginProcess(b, dir, ResourceName, n)
	WaitAllocatable(b, m, int64(n))
	m.Settle(b, before)
	held := allocateHolder(b, m, pods)
	p.Prepare(b, held)
	ClearUpdated(m)

	i := 0
	for b.Loop() {
		if i%2 == 0 {
			p.Send(b, "flip")
			WaitUpdated(b, m, int64(n-1))
		} else {
			p.Send(b, "heal")
			WaitUpdated(b, m, int64(n))
		}
		i++
	}
	b.StopTimer()
	reportMemory(b, p.Stop(b))
}

// AllocateBeside admits one pod asking for one device of ResourceName while a plugin of n
// devices of LargeResource is registered: n the largest plugin the kubelet accepts
// (KubeletMaxDevices), and LargeDevices for the sides that are not the kubelet. An op is
// Allocate/pods=0's (the previous op's pod leaves, the plugin's Allocate, the checkpoint
// write), but the checkpoint also lists the n registered devices of LargeResource, which
// every write encodes and hashes. The large plugin runs in a process of its own.
//
// Every side first runs besideWarmup ops untimed (warmUp): kdm fills the table of what its
// unchanged large list does to the checksum eight states per pass over the list, 16 passes in
// all, about 90 ms each at 1,000,000 devices, in the first admissions after the list changed.
// The ListAndWatchUpdate rows time what a list change costs.
func AllocateBeside(b *testing.B, sides []Side) {
	for _, n := range largeSizes() {
		b.Run(fmt.Sprintf("devices=%d", n), func(b *testing.B) {
			for _, side := range sides {
				b.Run(side.Name, func(b *testing.B) {
					skipOverKubeletLimit(b, side, n)
					allocateBesideOps(b, side, n)
				})
			}
		})
	}
}

func allocateBesideOps(b *testing.B, side Side, n int) {
	dir := ShortDir(b)
	pods := NewPodList()
	m := side.Start(b, dir, pods)
	before := CheckpointID(b, dir)
	StartPluginProcess(b, dir, LargeResource, n)
	SpinUntil(b, func() bool { return m.AllocatableOf(LargeResource) == int64(n) },
		func() string {
			return fmt.Sprintf("%s: %d allocatable after 30s, want %d", LargeResource, m.AllocatableOf(LargeResource), n)
		})
	m.Settle(b, before)
	before = CheckpointID(b, dir)
	StartPlugin(b, dir, DeviceList(1))
	WaitAllocatable(b, m, 1)
	m.Settle(b, before)

	next := 0
	var last *v1.Pod
	op := func() {
		pod := NewPod(next, 1)
		pods.Add(pod)
		if err := m.Allocate(pod); err != nil {
			b.Fatalf("allocating pod %d beside %d devices: %v", next, n, err)
		}
		pods.Remove(pod.UID) // the next op's garbage collection releases its device
		last = pod
		next++
	}
	report := warmUp(b, besideWarmup, op)
	for b.Loop() {
		op()
	}
	b.StopTimer()
	report()
	if got := len(m.Devices(last)); got != 1 {
		b.Fatalf("the last pod holds %d devices, want 1", got)
	}
}

// besideWarmup is how many untimed ops AllocateBeside runs on every side before it times any:
// enough for the checksum states before the registered devices to have met all 16 of the
// groups kdm fills in turn (all 16 are met within 128 random states 996 times in 1000).
const besideWarmup = 128

// reportMemory adds the memory metrics of listAndWatchLargeOps to b's results.
func reportMemory(b *testing.B, pluginPeak int64) {
	if hwm, ok := peakRSS(); ok {
		b.ReportMetric(float64(hwm)/(1<<20), "peak-MiB")
	}
	b.ReportMetric(float64(liveHeap())/(1<<20), "live-MiB")
	b.ReportMetric(float64(pluginPeak)/(1<<20), "plugin-peak-MiB")
}

// resetPeakRSS returns freed memory to the system and resets the process's peak resident
// memory to its current one (where the kernel allows it), so that peakRSS measures from here.
func resetPeakRSS() {
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSS is the process's peak resident memory (VmHWM), in bytes.
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

// liveHeap is the heap reachable now, after a full collection, in bytes.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// PluginProcessEnv, set in a test binary's environment, makes it serve a plugin instead of
// running tests: its value is "<plugin dir>,<resource>,<devices>" (see RunPluginProcess).
const PluginProcessEnv = "UPSTREAMBENCH_PLUGIN_PROCESS"

// RunPluginProcess serves the plugin PluginProcessEnv describes and returns true when it has
// stopped, or returns false at once when the variable is not set. A TestMain calls it first.
//
// The plugin is the kubelet's stub with DeviceList(devices) and the benchmarks' Allocate,
// serving "<resource's last name element>.sock" in the plugin directory; it registers, then
// prints "ready". It reads commands on standard input: "prepare <id>" builds a second list
// with device id unhealthy (answered "ok"), "flip" sends that list, "heal" the first one. At
// the end of its input it stops and prints "peak <bytes>", its peak resident memory.
func RunPluginProcess() bool {
	spec := os.Getenv(PluginProcessEnv)
	if spec == "" {
		return false
	}
	if err := servePluginProcess(spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "plugin process:", err)
		os.Exit(1)
	}
	return true
}

func servePluginProcess(spec string, in io.Reader, out io.Writer) error {
	f := strings.Split(spec, ",")
	if len(f) != 3 {
		return fmt.Errorf("%s=%q: want <dir>,<resource>,<devices>", PluginProcessEnv, spec)
	}
	dir, resource := f[0], f[1]
	n, err := strconv.Atoi(f[2])
	if err != nil {
		return fmt.Errorf("%s=%q: devices: %w", PluginProcessEnv, spec, err)
	}
	klog.SetLogger(logr.Discard()) // the stub logs every call
	healthy := DeviceList(n)
	s := stub.NewDevicePluginStub(logr.Discard(), healthy, filepath.Join(dir, filepath.Base(resource)+".sock"), resource, false, false)
	s.SetAllocFunc(allocate)
	if err := s.Start(context.Background()); err != nil {
		return fmt.Errorf("starting the plugin stub: %w", err)
	}
	defer func() { _ = s.Stop(logr.Discard()) }()
	if err := s.Register(context.Background(), filepath.Join(dir, KubeletSocketName), resource, ""); err != nil {
		return fmt.Errorf("registering the plugin stub: %w", err)
	}
	fmt.Fprintln(out, "ready")
	var flipped []*pluginapi.Device
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "prepare":
			flipped = DeviceList(n)
			for _, d := range flipped {
				if d.ID == arg {
					d.Health = pluginapi.Unhealthy
				}
			}
			fmt.Fprintln(out, "ok")
		case "flip":
			s.Update(flipped)
		case "heal":
			s.Update(healthy)
		default:
			return fmt.Errorf("unknown command %q", sc.Text())
		}
	}
	peak, _ := peakRSS()
	fmt.Fprintf(out, "peak %d\n", peak)
	return sc.Err()
}

// PluginProcess is a plugin served by a child process (RunPluginProcess).
type PluginProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
	peak   int64
	done   bool
}

// StartPluginProcess starts this test binary as the plugin of resource with n devices in
// dir and returns once the plugin has registered. tb's cleanup stops it.
func StartPluginProcess(tb testing.TB, dir, resource string, n int) *PluginProcess {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	p := &PluginProcess{cmd: exec.Command(exe, "-test.run=^$")}
	p.cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d", PluginProcessEnv, dir, resource, n))
	p.cmd.Stderr = &p.stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		tb.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	p.stdout = bufio.NewReader(stdout)
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("starting the plugin process: %v", err)
	}
	tb.Cleanup(func() { p.Stop(tb) })
	p.expect(tb, "ready")
	return p
}

// Prepare has the plugin build the list in which device id is unhealthy.
func (p *PluginProcess) Prepare(tb testing.TB, id string) {
	tb.Helper()
	p.Send(tb, "prepare "+id)
	p.expect(tb, "ok")
}

// Send sends the plugin one command ("flip" or "heal").
func (p *PluginProcess) Send(tb testing.TB, cmd string) {
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		tb.Fatalf("plugin process: %v; stderr: %s", err, &p.stderr)
	}
}

// expect reads the plugin's next line and fails tb unless it is want.
func (p *PluginProcess) expect(tb testing.TB, want string) {
	tb.Helper()
	line, err := p.stdout.ReadString('\n')
	if strings.TrimSpace(line) != want {
		tb.Fatalf("plugin process: %q (%v) where %q was due; stderr: %s", line, err, want, &p.stderr)
	}
}

// Stop stops the plugin process and returns its peak resident memory in bytes; a second call
// returns the same.
func (p *PluginProcess) Stop(tb testing.TB) int64 {
	if p.done {
		return p.peak
	}
	p.done = true
	_ = p.stdin.Close()
	line, _ := p.stdout.ReadString('\n')
	if v, ok := strings.CutPrefix(strings.TrimSpace(line), "peak "); ok {
		p.peak, _ = strconv.ParseInt(v, 10, 64)
	}
	if err := p.cmd.Wait(); err != nil {
		tb.Errorf("plugin process: %v; stderr: %s", err, &p.stderr)
	}
	return p.peak
}

// CheckPluginProcess checks the large benchmarks' rig on a small plugin: side's manager takes
// the devices of a PluginProcess, allocates one, and sees it flip and heal, each announced on
// Updated with the allocatable count changed.
func CheckPluginProcess(t *testing.T, side Side) {
	const n = 10
	dir := ShortDir(t)
	pods := NewPodList()
	m := side.Start(t, dir, pods)
	before := CheckpointID(t, dir)
	p := StartPluginProcess(t, dir, ResourceName, n)
	WaitAllocatable(t, m, n)
	m.Settle(t, before)
	p.Prepare(t, allocateHolder(t, m, pods))
	ClearUpdated(m)
	p.Send(t, "flip")
	WaitUpdated(t, m, n-1)
	p.Send(t, "heal")
	WaitUpdated(t, m, n)
	if peak := p.Stop(t); peak <= 0 {
		t.Errorf("the plugin process reported a peak of %d bytes", peak)
	}
}

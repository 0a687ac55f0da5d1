package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/internal/containerdtest"
)

// The container runtime tests run kdm with --container-runtime-endpoint against a private
// containerd (Debian's, with runc) that runs the probe image: a static program that reports the
// environment, device nodes and mounts its container sees, and writes to the devices it is
// told to. Each container's report is read from its log, which kdm has the runtime write under
// <root-dir>/kdm/pod-logs.

// nullResource is the SDK plugin's resource: each device is the host's /dev/null, handed to the
// container as /dev/kdm-null<N>, with a read-only mount of a host directory and an env var.
const nullResource = "example.com/null"

// runtimeNode is a node whose kdm runs pods as containers.
type runtimeNode struct {
	*node
	ctd    *containerdtest.Containerd
	rt     cri.RuntimeServiceClient
	image  string // the probe image
	devDir string // the mock GPUs' device nodes
	data   string // the directory the null plugin mounts read-only
}

// newRuntimeNode starts a private containerd with the probe and sandbox images, and makes
// device nodes for the mock DGX A100's GPUs (major 195, minor = the GPU's minor, as the NVIDIA
// driver numbers them), which exist but have no driver behind them.
func newRuntimeNode(t *testing.T) *runtimeNode {
	t.Helper()
	return withRuntime(t, newNode(t))
}

// withRuntime gives n a private containerd and the mock GPUs' device nodes.
func withRuntime(t *testing.T, n *node) *runtimeNode {
	t.Helper()
	ctd := containerdtest.Start(t)
	probe, _ := containerdtest.ImportProbe(t, ctd)
	rn := &runtimeNode{node: n, ctd: ctd, rt: ctd.Dial(t), image: probe,
		devDir: filepath.Join(n.base, "gpu-dev"), data: filepath.Join(n.base, "null-data")}
	for _, d := range []string{rn.devDir, rn.data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	nodes := map[string][2]uint32{"nvidiactl": {195, 255}, "nvidia-uvm": {510, 0}, "nvidia-uvm-tools": {510, 1}}
	for i := range 8 {
		nodes[fmt.Sprintf("nvidia%d", i)] = [2]uint32{195, uint32(i)}
	}
	for name, mm := range nodes {
		if err := unix.Mknod(filepath.Join(rn.devDir, name), unix.S_IFCHR|0o666, int(unix.Mkdev(mm[0], mm[1]))); err != nil {
			t.Fatalf("making the mock GPU device node %s: %v", name, err)
		}
	}
	return rn
}

// runtimeArgs are the flags of `kdm run` that make it run containers here.
func (rn *runtimeNode) runtimeArgs() []string {
	return []string{"--container-runtime-endpoint", rn.ctd.Endpoint(),
		"--pod-infra-container-image", containerdtest.SandboxImage, "--policy", "kdm"}
}

// startKdm starts kdm with the runtime.
func (rn *runtimeNode) startKdm(extra ...string) *process {
	return rn.node.startKdm(append(rn.runtimeArgs(), extra...)...)
}

// startGPUPlugin starts the mock DGX A100 plugin handing out the device nodes of devDir.
func (rn *runtimeNode) startGPUPlugin() *process {
	p := rn.start("kdm-nvml-plugin", "--mock", "dgxa100", "--device-plugin-dir", rn.pluginDir,
		"--device-dir", rn.devDir, "-v", "2")
	rn.mu.Lock()
	rn.plugins = append(rn.plugins, p)
	rn.mu.Unlock()
	return p
}

// startNullPlugin serves four /dev/null devices through the SDK, in the test process.
func (rn *runtimeNode) startNullPlugin(t *testing.T) {
	t.Helper()
	devs := make([]*pluginapi.Device, 4)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: fmt.Sprintf("null-%d", i), Health: pluginapi.Healthy}
	}
	plugin, err := deviceplugin.New(deviceplugin.Config{ResourceName: nullResource, PluginDir: rn.pluginDir, Devices: devs,
		KeepRegistering: true,
		Allocate: func(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			resp := &pluginapi.AllocateResponse{}
			for _, cr := range req.ContainerRequests {
				r := &pluginapi.ContainerAllocateResponse{
					Envs:   map[string]string{"KDM_NULL_DEVICES": strings.Join(cr.DevicesIds, ",")},
					Mounts: []*pluginapi.Mount{{HostPath: rn.data, ContainerPath: "/kdm-data", ReadOnly: true}},
				}
				var paths []string
				for _, id := range cr.DevicesIds {
					paths = append(paths, "/dev/kdm-"+id)
					r.Devices = append(r.Devices, &pluginapi.DeviceSpec{HostPath: "/dev/null",
						ContainerPath: "/dev/kdm-" + id, Permissions: "rw"})
				}
				r.Envs["PROBE_WRITE"] = strings.Join(paths, ",")
				resp.ContainerResponses = append(resp.ContainerResponses, r)
			}
			return resp, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := plugin.Start(ctx); err != nil {
		t.Fatalf("starting the null plugin: %v", err)
	}
	t.Cleanup(plugin.Stop)
}

// probeContainer is one container of a probe pod.
type probeContainer struct {
	name       string
	gpus, null int
	init       bool
	// exit, when set, makes the probe exit with that code once it has reported.
	exit string
	// termDelay makes the probe wait that long after SIGTERM before it exits.
	termDelay time.Duration
}

// writeProbePod places the manifest of a pod of probe containers in namespace e2e.
func (rn *runtimeNode) writeProbePod(name, restartPolicy string, containers ...probeContainer) {
	rn.t.Helper()
	rn.writeProbePodGrace(name, restartPolicy, 10, containers...)
}

// writeProbePodGrace is writeProbePod with the pod's terminationGracePeriodSeconds.
func (rn *runtimeNode) writeProbePodGrace(name, restartPolicy string, graceSeconds int, containers ...probeContainer) {
	rn.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %q\n  namespace: e2e\n  uid: %q\nspec:\n  restartPolicy: %s\n  terminationGracePeriodSeconds: %d\n",
		name, uidOf(name), restartPolicy, graceSeconds)
	section := func(key string, init bool) {
		first := true
		for _, c := range containers {
			if c.init != init {
				continue
			}
			if first {
				fmt.Fprintf(&b, "  %s:\n", key)
				first = false
			}
			// The null plugin tells the probe which devices to write (PROBE_WRITE).
			fmt.Fprintf(&b, "  - name: %s\n    image: %s\n    env:\n    - name: POD\n      value: %q\n", c.name, rn.image, name)
			if c.exit != "" {
				fmt.Fprintf(&b, "    - name: PROBE_EXIT\n      value: %q\n", c.exit)
			}
			if c.termDelay > 0 {
				fmt.Fprintf(&b, "    - name: PROBE_TERM_DELAY\n      value: %q\n", c.termDelay.String())
			}
			if c.gpus > 0 || c.null > 0 {
				b.WriteString("    resources:\n      limits:\n")
				if c.gpus > 0 {
					fmt.Fprintf(&b, "        nvidia.com/gpu: %d\n", c.gpus)
				}
				if c.null > 0 {
					fmt.Fprintf(&b, "        %s: %d\n", nullResource, c.null)
				}
			}
		}
	}
	section("initContainers", true)
	section("containers", false)
	rn.placeManifest(name+".yaml", b.String())
}

// probeReport waits for the report of the container's latest run, from its log.
func (rn *runtimeNode) probeReport(podName, container string) containerdtest.ProbeReport {
	rn.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		var logs []string
		logs, err = filepath.Glob(filepath.Join(rn.rootDir, "kdm", "pod-logs", "e2e_"+podName+"_*", container, "*.log"))
		if err == nil && len(logs) > 0 {
			slices.Sort(logs)
			var b []byte
			if b, err = os.ReadFile(logs[len(logs)-1]); err == nil {
				var r containerdtest.ProbeReport
				if r, err = containerdtest.ParseProbe(containerdtest.CRILogPayload(b)); err == nil {
					return r
				}
			}
		} else if err == nil {
			err = fmt.Errorf("no log yet")
		}
		time.Sleep(100 * time.Millisecond)
	}
	rn.t.Fatalf("no probe report of %s/%s within 30s: %v", podName, container, err)
	return nil
}

// containersOf lists the runtime's containers of the pod (running or not), by name.
func (rn *runtimeNode) containersOf(podName string) map[string]*cri.Container {
	rn.t.Helper()
	return rn.containersOfUID(uidOf(podName))
}

// containersOfUID lists the runtime's containers of the pod with that UID, by name.
func (rn *runtimeNode) containersOfUID(uid string) map[string]*cri.Container {
	rn.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rn.rt.ListContainers(ctx, &cri.ListContainersRequest{Filter: &cri.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
	if err != nil {
		rn.t.Fatalf("listing containers of pod %s: %v", uid, err)
	}
	out := map[string]*cri.Container{}
	for _, c := range resp.Containers {
		if prev, ok := out[c.Metadata.Name]; !ok || c.CreatedAt > prev.CreatedAt {
			out[c.Metadata.Name] = c
		}
	}
	return out
}

// sandboxCount is the number of pod sandboxes the runtime holds, ready or not.
func (rn *runtimeNode) sandboxCount() int {
	rn.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rn.rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		rn.t.Fatalf("listing sandboxes: %v", err)
	}
	return len(resp.Items)
}

// running reports whether the pod's result says the runtime runs it.
func running(name string) func(statusapi.NodeStatus) bool {
	return func(st statusapi.NodeStatus) bool {
		p := pod(st, name)
		return p != nil && p.Runtime != nil && p.Runtime.Phase == v1.PodRunning
	}
}

// checkDevicesArrived checks, from the container's own report, that it sees exactly the devices
// its result grants: NVIDIA_VISIBLE_DEVICES lists the container's GPUs, every granted device
// node exists with the host node's major and minor, and the null devices can be written.
func checkDevicesArrived(t *testing.T, rep containerdtest.ProbeReport, r *podresult.PodResult, container string) []string {
	t.Helper()
	var c *podresult.ContainerResult
	for i := range r.Containers {
		if r.Containers[i].Name == container {
			c = &r.Containers[i]
		}
	}
	if c == nil || c.RunOptions == nil {
		t.Fatalf("%s/%s: no run options in its result %+v", r.Name, container, r)
	}
	gpus := sorted(c.Devices()["nvidia.com/gpu"])
	if len(gpus) > 0 {
		got, ok := rep.Env("NVIDIA_VISIBLE_DEVICES")
		if !ok || !slices.Equal(sorted(strings.Split(got, ",")), gpus) {
			t.Errorf("%s/%s sees NVIDIA_VISIBLE_DEVICES=%q (set: %v); kdm granted %v", r.Name, container, got, ok, gpus)
		}
	}
	for _, d := range c.RunOptions.Devices {
		var st unix.Stat_t
		if err := unix.Stat(d.PathOnHost, &st); err != nil {
			t.Fatal(err)
		}
		seen, ok := rep.Device(d.PathInContainer)
		if !ok {
			t.Errorf("%s/%s: granted device %s (host %s) is missing in the container", r.Name, container, d.PathInContainer, d.PathOnHost)
			continue
		}
		if seen.Major != unix.Major(st.Rdev) || seen.Minor != unix.Minor(st.Rdev) {
			t.Errorf("%s/%s: %s is %d:%d in the container, %d:%d on the host (%s)", r.Name, container, d.PathInContainer,
				seen.Major, seen.Minor, unix.Major(st.Rdev), unix.Minor(st.Rdev), d.PathOnHost)
		}
	}
	for _, id := range c.Devices()[nullResource] {
		if w, ok := rep.Write("/dev/kdm-" + id); !ok || !w.OK {
			t.Errorf("%s/%s: writing its granted /dev/kdm-%s: %+v (reported: %v)", r.Name, container, id, w, ok)
		}
	}
	if len(c.Devices()[nullResource]) > 0 {
		if m, ok := rep.Mount("/kdm-data"); !ok || !m.ReadOnly() {
			t.Errorf("%s/%s: the plugin's read-only mount /kdm-data: %+v (present: %v)", r.Name, container, m, ok)
		}
	}
	return gpus
}

// TestContainerRuntimeDevicesArrive: admitted pods run as containers that see exactly their
// devices: an init container its own, the app containers theirs, two pods never the same GPU.
func TestContainerRuntimeDevicesArrive(t *testing.T) {
	innerLoopSkips(t, "starts containerd and runs four containers")
	rn := newRuntimeNode(t)
	rn.startKdm()
	rn.startGPUPlugin()
	rn.startNullPlugin(t)
	rn.eventually("8 GPUs", gpus(8))
	rn.writeProbePod("train", "Always",
		probeContainer{name: "setup", init: true, gpus: 1, null: 1, exit: "0"},
		probeContainer{name: "main", gpus: 2, null: 1})
	rn.writeProbePod("infer", "Always", probeContainer{name: "main", gpus: 2})
	st := rn.eventually("both pods running", func(st statusapi.NodeStatus) bool { return running("train")(st) && running("infer")(st) })

	train, infer := pod(st, "train"), pod(st, "infer")
	setupGPUs := checkDevicesArrived(t, rn.probeReport("train", "setup"), train, "setup")
	trainGPUs := checkDevicesArrived(t, rn.probeReport("train", "main"), train, "main")
	inferGPUs := checkDevicesArrived(t, rn.probeReport("infer", "main"), infer, "main")
	if len(setupGPUs) != 1 || len(trainGPUs) != 2 || len(inferGPUs) != 2 {
		t.Fatalf("GPU counts seen: setup %v, train %v, infer %v; want 1, 2, 2", setupGPUs, trainGPUs, inferGPUs)
	}
	disjointSets(t, map[string][]string{"train": trainGPUs, "infer": inferGPUs})

	init, ok := runtimeContainer(train, "setup")
	if !ok || init.State.Terminated == nil || init.State.Terminated.ExitCode != 0 {
		t.Errorf("the init container's status %+v; want terminated with exit code 0", init)
	}
	if st.Runtime.ContainersRun != true || !strings.Contains(st.Runtime.Message, "containerd") {
		t.Errorf("/status runtime %+v; want containers run through containerd", st.Runtime)
	}
}

// TestContainerRuntimeDeletionWaitsForExit: a deleted pod's GPUs go to no other pod while its
// container still runs (here it takes 3 s to stop after SIGTERM); once it exited, the next pod
// gets them.
func TestContainerRuntimeDeletionWaitsForExit(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out container stops and kdm restarts; run by make test")
	}
	rn := newRuntimeNode(t)
	rn.startKdm()
	rn.startGPUPlugin()
	rn.eventually("8 GPUs", gpus(8))
	rn.writeProbePod("holder", "Always", probeContainer{name: "main", gpus: 8, termDelay: 3 * time.Second})
	st := rn.eventually("holder running", running("holder"))
	held := resultGPUs(pod(st, "holder"))
	rn.probeReport("holder", "main")

	rn.deletePod("holder")
	rn.writeProbePod("early", "Always", probeContainer{name: "main", gpus: 1})
	early := rn.eventually("the early pod decided", decided("early"))
	sawRunning := false
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Free first: a container seen running after it was read ran when it was read.
		free := rn.freeGPUs()
		ctr := rn.containersOf("holder")["main"]
		if ctr == nil || ctr.State != cri.ContainerState_CONTAINER_RUNNING {
			break
		}
		sawRunning = true
		if free != 0 {
			t.Fatalf("the deleted pod's container still runs, yet %d GPUs are free", free)
		}
		if time.Now().After(deadline) {
			t.Fatal("the deleted pod's container did not stop within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !sawRunning {
		t.Fatal("the deleted pod's container was gone at once; it should take 3s to stop")
	}
	if p := pod(early, "early"); p.Phase != podresult.PhaseRejected || len(resultGPUs(p)) != 0 {
		t.Errorf("a pod admitted while the deleted pod's container ran: %+v; want it rejected with no GPUs", p)
	}
	deadline = time.Now().Add(30 * time.Second)
	for rn.freeGPUs() != 8 {
		if time.Now().After(deadline) {
			t.Fatal("the deleted pod's GPUs were not freed within 30s of its container's exit")
		}
		time.Sleep(100 * time.Millisecond)
	}
	rn.writeProbePod("next", "Always", probeContainer{name: "main", gpus: 8})
	st = rn.eventually("next running", running("next"))
	if got := sorted(checkDevicesArrived(t, rn.probeReport("next", "main"), pod(st, "next"), "main")); !slices.Equal(got, sorted(held)) {
		t.Errorf("next sees %v; want the deleted pod's GPUs %v", got, held)
	}
}

// TestContainerRuntimeSurvivesRestarts: a kdm SIGKILL and restart, at any point of a pod's
// start, leaves running containers running with their GPUs, finishes or cleans up half-started
// pods and leaves nothing orphaned; a plugin restart disturbs no container.
func TestContainerRuntimeSurvivesRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out container stops and kdm restarts; run by make test")
	}
	rn := newRuntimeNode(t)
	kdm := rn.startKdm()
	plugin := rn.startGPUPlugin()
	rn.eventually("8 GPUs", gpus(8))
	rn.writeProbePod("steady", "Always", probeContainer{name: "main", gpus: 2})
	st := rn.eventually("steady running", running("steady"))
	steadyGPUs := resultGPUs(pod(st, "steady"))
	steadyID := rn.containersOf("steady")["main"].Id

	unchanged := func(when string) {
		t.Helper()
		c := rn.containersOf("steady")["main"]
		if c == nil || c.Id != steadyID || c.State != cri.ContainerState_CONTAINER_RUNNING || c.Metadata.Attempt != 0 {
			t.Fatalf("%s: steady's container is %+v; want %s still running, never restarted", when, c, steadyID)
		}
	}

	// kdm killed at points of a pod's start: before admission, during admission and
	// sandbox creation, while its container starts.
	for i, delay := range []time.Duration{0, 30 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond} {
		name := fmt.Sprintf("starting-%d", i)
		rn.writeProbePod(name, "Always", probeContainer{name: "main", gpus: 1})
		time.Sleep(delay)
		_ = kdm.cmd.Process.Signal(syscall.SIGKILL)
		<-kdm.done
		kdm = rn.startKdm()
		st = rn.eventually(name+" running after the restart", func(st statusapi.NodeStatus) bool {
			return running("steady")(st) && running(name)(st)
		})
		unchanged(fmt.Sprintf("kdm killed %v into %s's start", delay, name))
		if got := resultGPUs(pod(st, "steady")); !slices.Equal(sorted(got), sorted(steadyGPUs)) {
			t.Fatalf("steady holds %v after the restart; it held %v", got, steadyGPUs)
		}
		if c := rn.containersOf(name); len(c) != 1 {
			t.Fatalf("%s has %d containers in the runtime after the restart; want 1: %v", name, len(c), c)
		}
		checkDevicesArrived(t, rn.probeReport(name, "main"), pod(st, name), "main")
		rn.deletePod(name)
		rn.eventually(name+" gone", func(st statusapi.NodeStatus) bool { return pod(st, name) == nil })
	}
	if n := rn.sandboxCount(); n != 1 {
		t.Errorf("the runtime holds %d sandboxes; want only steady's", n)
	}

	// kdm killed while a deleted pod's container stops (2 s): after the restart the pod is
	// gone from the sources, its container still runs, and its GPUs stay held until it exited.
	rn.writeProbePod("stopping", "Always", probeContainer{name: "main", gpus: 6, termDelay: 2 * time.Second})
	rn.eventually("stopping running", running("stopping"))
	rn.deletePod("stopping")
	time.Sleep(500 * time.Millisecond) // kdm sees the deletion and starts the stop (either way, the restart must hold)
	kdm.kill()
	rn.startKdm()
	rn.eventually("kdm serving after the kill", func(statusapi.NodeStatus) bool { return true })
	for {
		free := rn.freeGPUs()
		c := rn.containersOf("stopping")["main"]
		if c == nil {
			break
		}
		if c.State == cri.ContainerState_CONTAINER_RUNNING && free != 0 {
			t.Fatalf("after a restart, the deleted pod's container still runs, yet %d GPUs are free; want 0 (it holds 6 of the 8, steady 2)", free)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rn.eventually("the deleted pod gone from every view", func(st statusapi.NodeStatus) bool { return pod(st, "stopping") == nil })
	if free := rn.freeGPUs(); free != 6 {
		t.Errorf("%d GPUs free once the deleted pod's container is gone; want 6 (steady holds 2)", free)
	}

	plugin.kill()
	rn.startGPUPlugin()
	rn.eventually("the plugin back", func(st statusapi.NodeStatus) bool { return st.Capacity["nvidia.com/gpu"] == 8 })
	rn.writeProbePod("after-plugin", "Always", probeContainer{name: "main", gpus: 1})
	st = rn.eventually("a pod after the plugin restart", running("after-plugin"))
	unchanged("after a plugin restart")
	disjointSets(t, map[string][]string{"steady": resultGPUs(pod(st, "steady")), "after-plugin": resultGPUs(pod(st, "after-plugin"))})
}

// TestContainerRuntimeExitCodes: a pod whose container exits shows it: restartPolicy Never and
// exit code 3 is Failed with that exit code, and its GPUs go back to the pool.
func TestContainerRuntimeExitCodes(t *testing.T) {
	rn := newRuntimeNode(t)
	rn.startKdm()
	rn.startGPUPlugin()
	rn.eventually("8 GPUs", gpus(8))
	rn.writeProbePod("fails", "Never", probeContainer{name: "main", gpus: 2, exit: "3"})
	st := rn.eventually("fails failed", func(st statusapi.NodeStatus) bool {
		p := pod(st, "fails")
		return p != nil && p.Runtime != nil && p.Runtime.Phase == v1.PodFailed
	})
	cs, ok := runtimeContainer(pod(st, "fails"), "main")
	if !ok || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 3 || cs.RestartCount != 0 {
		t.Errorf("the failed container's status %+v; want terminated with exit code 3, never restarted", cs)
	}
	deadline := time.Now().Add(30 * time.Second)
	for rn.freeGPUs() != 8 {
		if time.Now().After(deadline) {
			t.Fatal("a finished pod's GPUs did not go back to the pool within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeGPUs is the number of GPUs a new pod could get now, from the status page's state.
func (rn *runtimeNode) freeGPUs() int64 {
	rn.t.Helper()
	for _, r := range rn.pageState().Resources {
		if r.Name == "nvidia.com/gpu" {
			return r.Free
		}
	}
	return 0
}

// runtimeContainer is the runtime's status of the pod's container of that name.
func runtimeContainer(r *podresult.PodResult, name string) (v1.ContainerStatus, bool) {
	if r.Runtime == nil {
		return v1.ContainerStatus{}, false
	}
	for _, cs := range append(slices.Clone(r.Runtime.InitContainerStatuses), r.Runtime.ContainerStatuses...) {
		if cs.Name == name {
			return cs, true
		}
	}
	return v1.ContainerStatus{}, false
}

// TestContainerRuntimeSchedulerInTheLoop: with --kubeconfig and a container runtime, the
// scheduler places GPU pods on kdm's node and they run as real containers: a serving pod is
// Running and Ready with a containerd container that sees exactly its GPUs, a job that exits 0
// is Succeeded, one that exits 3 is Failed with that exit code, and the finished pods' GPUs go
// to the next pod.
func TestContainerRuntimeSchedulerInTheLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver, kube-scheduler, kube-controller-manager and etcd; run by make test")
	}
	c := schedulerCluster.Get(t)
	cn := newClusterNode(t, c, schedulerNode)
	rn := withRuntime(t, cn.node)
	cn.kdmArgs = append(rn.runtimeArgs(), "--node-ip=127.0.0.1")
	rn.startGPUPlugin()
	cn.startKdm()
	cn.waitGPUs(8, 8)

	pods := cn.admin.CoreV1().Pods(cn.ns)
	create := func(name string, gpus int64, policy v1.RestartPolicy, env ...v1.EnvVar) {
		t.Helper()
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cn.ns}, Spec: v1.PodSpec{
			RestartPolicy:                 policy,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers: []v1.Container{{Name: "main", Image: rn.image, Env: env,
				Resources: v1.ResourceRequirements{Limits: v1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}}}},
		}}
		if _, err := pods.Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
	}
	waitPod := func(name, what string, cond func(*v1.Pod) bool) *v1.Pod {
		t.Helper()
		var got *v1.Pod
		pollAPI(t, name+" "+what, schedulerWait, 200*time.Millisecond, func() (bool, string) {
			p, err := pods.Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			got = p
			return cond(p), describe(p) + fmt.Sprintf(" containers %+v", p.Status.ContainerStatuses)
		})
		return got
	}
	terminated := func(phase v1.PodPhase, code int32) func(*v1.Pod) bool {
		return func(p *v1.Pod) bool {
			return p.Status.Phase == phase && len(p.Status.ContainerStatuses) == 1 &&
				p.Status.ContainerStatuses[0].State.Terminated != nil && p.Status.ContainerStatuses[0].State.Terminated.ExitCode == code
		}
	}

	create("serve", 4, v1.RestartPolicyAlways, v1.EnvVar{Name: "PROBE_TERM_DELAY", Value: "2s"})
	create("job-ok", 2, v1.RestartPolicyNever, v1.EnvVar{Name: "PROBE_EXIT", Value: "0"})
	create("job-fails", 2, v1.RestartPolicyNever, v1.EnvVar{Name: "PROBE_EXIT", Value: "3"})
	serve := waitPod("serve", "Running and Ready in a containerd container", func(p *v1.Pod) bool {
		return runningReady(p) && strings.HasPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	})
	waitPod("job-ok", "Succeeded with exit code 0", terminated(v1.PodSucceeded, 0))
	waitPod("job-fails", "Failed with exit code 3", terminated(v1.PodFailed, 3))

	rep := cn.probeReportOf(rn, "serve", serve)
	seen, _ := rep.Env("NVIDIA_VISIBLE_DEVICES")
	if got, want := sorted(strings.Split(seen, ",")), cn.gpusOf("serve"); !slices.Equal(got, want) {
		t.Errorf("serve's container sees NVIDIA_VISIBLE_DEVICES %v; podresources says it holds %v", got, want)
	}

	// The jobs are finished: their 4 GPUs go to the next pod.
	create("after-jobs", 4, v1.RestartPolicyAlways)
	waitPod("after-jobs", "Running and Ready on the finished jobs' GPUs", runningReady)
	disjointSets(t, map[string][]string{"serve": cn.gpusOf("serve"), "after-jobs": cn.gpusOf("after-jobs")})

	// A deleted pod stays Terminating in the API until its container (2 s to stop) is gone.
	if err := pods.Delete(context.Background(), "serve", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sawTerminating := false
	pollAPI(t, "serve deleted by the node", schedulerWait, 100*time.Millisecond, func() (bool, string) {
		_, err := pods.Get(context.Background(), "serve", metav1.GetOptions{})
		if err == nil {
			sawTerminating = true
			return false, "still in the API"
		}
		if !apierrors.IsNotFound(err) {
			return false, err.Error()
		}
		if left := rn.containersOfUID(string(serve.UID)); len(left) != 0 {
			t.Fatalf("serve was deleted from the API while the runtime still held its containers %v", left)
		}
		return true, ""
	})
	if !sawTerminating {
		t.Error("serve left the API at once; it should stay Terminating while its container stops")
	}
}

// probeReportOf reads the probe report of a pod from the API server from its container log.
func (cn *clusterNode) probeReportOf(rn *runtimeNode, name string, p *v1.Pod) containerdtest.ProbeReport {
	cn.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		var b []byte
		path := filepath.Join(rn.rootDir, "kdm", "pod-logs", fmt.Sprintf("%s_%s_%s", p.Namespace, name, p.UID), "main", "0.log")
		if b, err = os.ReadFile(path); err == nil {
			var r containerdtest.ProbeReport
			if r, err = containerdtest.ParseProbe(containerdtest.CRILogPayload(b)); err == nil {
				return r
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	cn.t.Fatalf("no probe report of %s within 30s: %v", name, err)
	return nil
}

// TestContainerRuntimeStatusPage: with a runtime, the status page says which one runs the
// containers, and each pod card shows the runtime's phase and its containers' states: a running
// container, and one that exited with code 3.
func TestContainerRuntimeStatusPage(t *testing.T) {
	if testing.Short() {
		t.Skip("drives headless Chromium; run by make test")
	}
	b := newBrowser(t, 1280, 900, 60*time.Second)
	rn := newRuntimeNode(t)
	rn.startKdm()
	rn.startGPUPlugin()
	rn.eventually("8 GPUs", gpus(8))
	rn.writeProbePod("serving", "Always", probeContainer{name: "main", gpus: 1})
	rn.writeProbePod("crashed", "Never", probeContainer{name: "main", gpus: 1, exit: "3"})
	rn.eventually("serving running, crashed failed", func(st statusapi.NodeStatus) bool {
		c := pod(st, "crashed")
		return running("serving")(st) && c != nil && c.Runtime != nil && c.Runtime.Phase == v1.PodFailed
	})

	b.do(chromedp.Navigate("http://" + rn.healthAddr + "/"))
	card := func(v pageView, name string) pagePod {
		for _, p := range v.Pods {
			if p.Pod == "e2e/"+name {
				return p
			}
		}
		return pagePod{}
	}
	v, _ := b.waitView("both pod cards with their runtime phase", 10*time.Second, func(v pageView) bool {
		return card(v, "serving").RuntimePhase == "Running" && card(v, "crashed").RuntimePhase == "Failed"
	})
	if !strings.Contains(v.Runtime, "containerd") {
		t.Errorf("the pods section says %q about containers; want it to name containerd", v.Runtime)
	}
	if text := card(v, "serving").Text; !strings.Contains(text, "running") {
		t.Errorf("the serving pod's card reads %q; want its container shown running", text)
	}
	if text := card(v, "crashed").Text; !strings.Contains(text, "exited 3 (Error)") {
		t.Errorf("the crashed pod's card reads %q; want its container shown as exited 3 (Error)", text)
	}
}

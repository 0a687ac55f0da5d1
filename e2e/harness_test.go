package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kdm-project/kdm/agent"
	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
)

// binDir holds the binaries built once by TestMain.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "kdm-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	binDir = dir
	for _, c := range []string{"kdm", "kdm-nvml-plugin"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, c), "../cmd/"+c)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n", c, err)
			return 1
		}
	}
	defer sharedCluster.Stop()
	defer schedulerCluster.Stop()
	return m.Run()
}

// node is one simulated node's directories.
type node struct {
	t          *testing.T
	base       string
	pluginDir  string
	rootDir    string
	manifests  string
	healthDir  string
	healthAddr string

	mu      sync.Mutex
	plugins []*process
}

func newNode(t *testing.T) *node {
	t.Helper()
	base, err := os.MkdirTemp("", "kdm-e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node directory kept for inspection: %s", base)
			return
		}
		_ = os.RemoveAll(base)
	})
	n := &node{t: t, base: base, pluginDir: filepath.Join(base, "dp"), rootDir: filepath.Join(base, "root"),
		manifests: filepath.Join(base, "manifests"), healthDir: filepath.Join(base, "health"), healthAddr: freeAddr(t)}
	for _, d := range []string{n.pluginDir, n.rootDir, n.manifests, n.healthDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// process is a started binary; its output goes to a log file shown when the test fails.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func (n *node) start(name string, args ...string) *process {
	n.t.Helper()
	logPath := filepath.Join(n.base, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		n.t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	n.t.Cleanup(func() {
		p.kill()
		if n.t.Failed() {
			b, _ := os.ReadFile(logPath)
			n.t.Logf("--- %s log (%s) ---\n%s", name, logPath, tail(string(b), 4000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// kill sends SIGKILL to the process group and waits for the exit.
func (p *process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// terminate sends SIGTERM and waits for a clean exit.
func (p *process) terminate(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("%s exited with %d after SIGTERM", p.name, code)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not exit within 15s of SIGTERM", p.name)
	}
}

func (n *node) startKdm(extra ...string) *process {
	args := append([]string{"run", "--root-dir", n.rootDir, "--device-plugin-dir", n.pluginDir,
		"--pod-manifest-path", n.manifests, "--healthz-bind-address", n.healthAddr, "-v", "2"}, extra...)
	return n.start("kdm", args...)
}

// startServing starts kdm and the mock DGX A100 plugin and waits, under the name what, until
// the node reports its 8 GPUs; it returns the kdm process.
func (n *node) startServing(what string) *process {
	kdm := n.startKdm()
	n.startPlugin()
	n.eventually(what, gpus(8))
	return kdm
}

func (n *node) startPlugin() *process {
	p := n.start("kdm-nvml-plugin", "--mock", "dgxa100", "--device-plugin-dir", n.pluginDir,
		"--health-control-dir", n.healthDir, "-v", "2")
	n.mu.Lock()
	n.plugins = append(n.plugins, p)
	n.mu.Unlock()
	return p
}

// status fetches /status; ok is false while kdm is not serving.
func (n *node) status() (statusapi.NodeStatus, bool) {
	var st statusapi.NodeStatus
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + n.healthAddr + "/status")
	if err != nil {
		return st, false
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return st, false
	}
	return st, true
}

// eventually polls cond every 50 ms until it holds or 30 s pass. Processes report through files
// and sockets only, so polling is the event source here.
func (n *node) eventually(what string, cond func(statusapi.NodeStatus) bool) statusapi.NodeStatus {
	n.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last statusapi.NodeStatus
	for time.Now().Before(deadline) {
		if st, ok := n.status(); ok {
			last = st
			if cond(st) {
				return st
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.t.Fatalf("timed out waiting for %s; last status: %+v", what, last)
	return last
}

func gpus(n int64) func(statusapi.NodeStatus) bool {
	return func(st statusapi.NodeStatus) bool {
		return st.Capacity["nvidia.com/gpu"] == 8 && st.Allocatable["nvidia.com/gpu"] == n
	}
}

// writePod places a manifest for a pod asking for count GPUs.
func (n *node) writePod(name string, count int) { n.writeResourcePod(name, "nvidia.com/gpu", count) }

// writeResourcePod places a manifest (temp file and rename) for a pod whose single container
// asks for count of resource. The pod's UID derives from its name (uidOf).
func (n *node) writeResourcePod(name, resource string, count int) {
	n.t.Helper()
	limits := fmt.Sprintf("      limits:\n        %s: %d\n", resource, count)
	n.placeManifest(name+".yaml", podManifest(name, uidOf(name), limits))
}

// podManifest is a one-container pod manifest in namespace e2e; resources is the YAML of the
// container's resources block, indented by six spaces.
func podManifest(name, uid, resources string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %q
  namespace: e2e
  uid: %q
spec:
  containers:
  - name: main
    image: example.com/app
    resources:
%s`, name, uid, resources)
}

func gpuLimit(count int) string {
	return fmt.Sprintf("      limits:\n        nvidia.com/gpu: %d\n", count)
}

// uidOf is the UID writePod gives the named pod, so that a re-created pod keeps its UID.
func uidOf(name string) string { return fmt.Sprintf("00000000-0000-4000-8000-%012x", podNumber(name)) }

// placeManifest writes a manifest file atomically (temp file and rename).
func (n *node) placeManifest(file, body string) {
	n.t.Helper()
	tmp := filepath.Join(n.manifests, "."+file+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(n.manifests, file)); err != nil {
		n.t.Fatal(err)
	}
}

// podNumber makes a pod's UID from its name, so that a re-created pod keeps its UID.
func podNumber(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64() & 0xffffffffffff
}

func (n *node) deletePod(name string) {
	n.t.Helper()
	if err := os.Remove(filepath.Join(n.manifests, name+".yaml")); err != nil {
		n.t.Fatal(err)
	}
}

// pod returns the status entry of the named pod.
func pod(st statusapi.NodeStatus, name string) *podresult.PodResult {
	for _, p := range st.Pods {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// visible returns the GPUs in a pod's NVIDIA_VISIBLE_DEVICES (main container).
func visible(p *podresult.PodResult) []string {
	if p == nil {
		return nil
	}
	for _, c := range p.Containers {
		if c.RunOptions == nil {
			continue
		}
		for _, e := range c.RunOptions.Envs {
			if e.Name == "NVIDIA_VISIBLE_DEVICES" {
				return strings.Split(e.Value, ",")
			}
		}
	}
	return nil
}

// podResources lists the node's assignments through the podresources API.
func (n *node) podResources() map[string][]string {
	n.t.Helper()
	sock := filepath.Join(n.rootDir, "pod-resources", "kubelet.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		n.t.Fatalf("podresources List: %v", err)
	}
	out := map[string][]string{}
	for _, p := range resp.PodResources {
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				out[p.Name] = append(out[p.Name], d.DeviceIds...)
			}
		}
	}
	return out
}

// setHealth writes the plugin's health control file for a GPU.
func (n *node) setHealth(uuid, health string) {
	n.t.Helper()
	path := filepath.Join(n.healthDir, uuid)
	tmp := filepath.Join(n.base, "health-"+uuid+".tmp")
	if err := os.WriteFile(tmp, []byte(health), 0o600); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		n.t.Fatal(err)
	}
}

// killPlugins SIGKILLs every plugin process started on this node.
func (n *node) killPlugins() {
	n.mu.Lock()
	procs := append([]*process(nil), n.plugins...)
	n.plugins = nil
	n.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
}

// resultsDir is where `kdm run --root-dir rootDir` writes its per-pod results: the agent's
// default, <root-dir>/kdm/pods.
func resultsDir(rootDir string) string { return agent.Config{RootDir: rootDir}.PodsDir() }

// admit writes pod name asking for count GPUs, waits until the agent admits it with that many,
// and returns the GPUs it holds, sorted.
func (n *node) admit(name string, count int) []string {
	n.t.Helper()
	n.writePod(name, count)
	st := n.eventually(name+" admitted", func(st statusapi.NodeStatus) bool { return len(visible(pod(st, name))) == count })
	return sorted(visible(pod(st, name)))
}

// startWithGPUs starts kdm under policy and the mock GPU plugin, and waits for its 8 GPUs.
func (n *node) startWithGPUs(policy string) *process {
	n.t.Helper()
	kdm := n.startKdm("--policy", policy)
	n.startPlugin()
	n.eventually("8 GPUs", gpus(8))
	return kdm
}

// restartKeeping starts kdm again under policy, waits for the plugin's GPUs, checks that every
// pod in held keeps its GPUs, and admits pod name with count GPUs, which must all be free: they
// are added to held.
func (n *node) restartKeeping(policy string, held map[string][]string, name string, count int) *process {
	n.t.Helper()
	kdm := n.startKdm("--policy", policy)
	n.eventually("plugin back after the restart", gpus(8))
	n.expectHolding(held)
	held[name] = n.admit(name, count)
	disjointSets(n.t, held)
	return kdm
}

// innerLoopSkips skips a test that takes seconds of waiting under -short (make check, the inner
// loop, which should stay under a minute and a half); make test and CI run it. why says what it
// waits for.
func innerLoopSkips(t *testing.T, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip(why + "; run by make test")
	}
}

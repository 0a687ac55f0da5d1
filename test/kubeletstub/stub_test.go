package kubeletstub

import (
	"context"
	"encoding/json"
	"fmt"
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

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	stub "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/devicemanager"
)

var kdmBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kdm-stub-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kdmBin = filepath.Join(dir, "kdm")
	cmd := exec.Command("go", "build", "-C", "../..", "-o", kdmBin, "./cmd/kdm") // built in the root module
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building kdm:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const resource = "example.com/stub"

// kdmProcess is a running `kdm run`.
type kdmProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// startKdm runs `kdm run --policy policy` on the directories under base, serving its status
// on addr.
func startKdm(t *testing.T, base, addr, policy string) *kdmProcess {
	t.Helper()
	logPath := filepath.Join(base, fmt.Sprintf("kdm-%d.log", time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kdmBin, "run", "--policy", policy, "--root-dir", filepath.Join(base, "root"), "--device-plugin-dir", filepath.Join(base, "dp"),
		"--pod-manifest-path", filepath.Join(base, "pods"), "--healthz-bind-address", addr, "-v", "2")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &kdmProcess{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); _ = f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("kdm log:\n%s", b)
		}
	})
	return p
}

func (p *kdmProcess) kill() {
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func status(addr string) (statusapi.NodeStatus, bool) {
	var st statusapi.NodeStatus
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/status")
	if err != nil {
		return st, false
	}
	defer func() { _ = resp.Body.Close() }()
	return st, json.NewDecoder(resp.Body).Decode(&st) == nil
}

func eventually(t *testing.T, addr, what string, cond func(statusapi.NodeStatus) bool) statusapi.NodeStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last statusapi.NodeStatus
	for time.Now().Before(deadline) {
		if st, ok := status(addr); ok {
			last = st
			if cond(st) {
				return st
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last status %+v", what, last)
	return last
}

func freeAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	return lis.Addr().String()
}

// TestKubeletStubPlugin runs the kubelet's own device-plugin stub
// (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1, from the release go.mod pins;
// the stub is the same in every supported release) against a `kdm run` under each kubelet
// policy kdm supports, for all four combinations of PreStartRequired and
// GetPreferredAllocationAvailable: it registers, its devices are allocated and reported,
// PreStartContainer is honoured, it re-registers by itself when kdm is restarted, and a second
// Register on its socket while it is connected gets the policy's answer.
func TestKubeletStubPlugin(t *testing.T) {
	for _, kubelet := range devicemanager.KubeletVersions() {
		t.Run(kubelet.Name, func(t *testing.T) {
			for _, preStart := range []bool{false, true} {
				for _, preferred := range []bool{false, true} {
					t.Run(fmt.Sprintf("preStart=%v,preferred=%v", preStart, preferred), func(t *testing.T) {
						testStub(t, kubelet, preStart, preferred)
					})
				}
			}
		})
	}
}

func testStub(t *testing.T, kubelet devicemanager.KubeletVersion, preStart, preferred bool) {
	base, err := os.MkdirTemp("", "kdm-stub")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	dp := filepath.Join(base, "dp")
	for _, d := range []string{dp, filepath.Join(base, "pods")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	addr := freeAddr(t)
	kdm := startKdm(t, base, addr, kubelet.Name)
	eventually(t, addr, "kdm serving", func(statusapi.NodeStatus) bool { return true })

	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	devs := []*pluginapi.Device{{ID: "dev-0", Health: pluginapi.Healthy}, {ID: "dev-1", Health: pluginapi.Healthy}, {ID: "dev-2", Health: pluginapi.Healthy}}
	s := stub.NewDevicePluginStub(logger, devs, filepath.Join(dp, "stub.sock"), resource, preStart, preferred)
	var mu sync.Mutex
	var allocated [][]string
	s.SetAllocFunc(func(r *pluginapi.AllocateRequest, _ map[string]*pluginapi.Device) (*pluginapi.AllocateResponse, error) {
		resp := &pluginapi.AllocateResponse{}
		for _, cr := range r.ContainerRequests {
			mu.Lock()
			allocated = append(allocated, cr.DevicesIds)
			mu.Unlock()
			resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
				Envs: map[string]string{"STUB_DEVICES": strings.Join(cr.DevicesIds, ",")}})
		}
		return resp, nil
	})
	if preferred {
		s.SetGetPreferredAllocFunc(func(r *pluginapi.PreferredAllocationRequest, _ map[string]*pluginapi.Device) (*pluginapi.PreferredAllocationResponse, error) {
			resp := &pluginapi.PreferredAllocationResponse{}
			for _, cr := range r.ContainerRequests {
				// Prefer the highest IDs, so the choice is visibly the plugin's.
				ids := append([]string(nil), cr.AvailableDeviceIDs...)
				for i, j := 0, len(ids)-1; i < j; i, j = i+1, j-1 {
					ids[i], ids[j] = ids[j], ids[i]
				}
				resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids[:cr.AllocationSize]})
			}
			return resp, nil
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = s.Stop(logger) })
	if err := s.Register(ctx, filepath.Join(dp, "kubelet.sock"), resource, dp); err != nil {
		t.Fatalf("the kubelet's stub failed to register with kdm: %v", err)
	}
	go s.Watch(ctx, filepath.Join(dp, "kubelet.sock"), resource, dp)
	eventually(t, addr, "3 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable[resource] == 3 })

	manifest := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: ns\n  uid: 5a5a5a5a-0000-4000-8000-000000000001\nspec:\n  containers:\n  - name: c\n    image: x\n    resources:\n      limits:\n        " + resource + ": 2\n"
	if err := os.WriteFile(filepath.Join(base, "pods", "p.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	st := eventually(t, addr, "pod admitted", func(st statusapi.NodeStatus) bool {
		return len(st.Pods) == 1 && st.Pods[0].Phase == podresult.PhaseAdmitted
	})
	env := st.Pods[0].Containers[0].RunOptions.Envs
	if len(env) != 1 || env[0].Name != "STUB_DEVICES" || len(strings.Split(env[0].Value, ",")) != 2 {
		t.Fatalf("run options %+v do not carry the stub's Allocate answer", st.Pods[0].Containers[0].RunOptions)
	}
	mu.Lock()
	got := allocated
	mu.Unlock()
	if len(got) != 1 || len(got[0]) != 2 {
		t.Fatalf("stub Allocate calls %v, want one call for 2 devices", got)
	}
	if preferred && strings.Join(got[0], ",") != "dev-2,dev-1" && strings.Join(got[0], ",") != "dev-1,dev-2" {
		t.Fatalf("kdm ignored the stub's preferred allocation: got %v, want dev-1 and dev-2", got[0])
	}

	// kdm restarts: the stub sees kubelet.sock re-created and registers again by itself.
	kdm.kill()
	startKdm(t, base, addr, kubelet.Name)
	eventually(t, addr, "stub back after a kdm restart", func(st statusapi.NodeStatus) bool {
		return st.Allocatable[resource] == 3 && len(st.Pods) == 1 && st.Pods[0].Phase == podresult.PhaseAdmitted
	})

	// The stub registers again on the socket it is connected on. The kubelet v1.36 replaces
	// the instance; from v1.37 the kubelet refuses, with gRPC's Unknown and the socket's path,
	// and the stub stops serving when its Register fails.
	err = s.Register(ctx, filepath.Join(dp, "kubelet.sock"), resource, dp)
	if !kubelet.Policy.RejectSameSocketRegistration {
		if err != nil {
			t.Fatalf("a second Register on the connected socket: %v, want it accepted", err)
		}
		eventually(t, addr, "3 devices from the replacing instance", func(st statusapi.NodeStatus) bool { return st.Allocatable[resource] == 3 })
		return
	}
	want := "device plugin already connected: " + filepath.Join(dp, "stub.sock")
	if st, ok := grpcstatus.FromError(err); err == nil || !ok || st.Code() != codes.Unknown || st.Message() != want {
		t.Fatalf("a second Register on the connected socket: %v, want code Unknown and %q", err, want)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
)

// getFixture is a node as kdm reports it: two resources, one of them with a stopped plugin,
// an admitted pod holding two GPUs in an init and an app container, a rejected pod and a
// pending one.
func getFixture() (*podresourcesv1.ListPodResourcesResponse, *statusapi.PageState) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	stopped := now.Add(-90 * time.Second)
	holders := []statusapi.PageHolder{{Pod: "ml/inference", Container: "server"}, {Pod: "ml/inference", Container: "warmup"}}
	st := &statusapi.PageState{Time: now, GracePeriodSeconds: 300, Runtime: statusapi.RuntimeInfo{Message: podresult.NoContainersMessage},
		Resources: []statusapi.PageResource{
			{Name: "example.com/nic", Capacity: 2, Allocatable: 2,
				Endpoint: statusapi.PageEndpoint{State: "Stopped", Socket: "/var/lib/kubelet/device-plugins/nic.sock", StoppedAt: &stopped, GraceRemainingMs: 210_000},
				Devices:  []statusapi.PageDevice{{ID: "nic-0", Health: "Healthy"}, {ID: "nic-1", Health: "Healthy", Reserved: true}}},
			{Name: "nvidia.com/gpu", Capacity: 4, Allocatable: 3,
				Endpoint: statusapi.PageEndpoint{State: "Running", Socket: "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"},
				Devices: []statusapi.PageDevice{
					{ID: mockGPU(0), Health: "Healthy", NUMANodes: []int64{0}, Holders: holders},
					{ID: mockGPU(1), Health: "Healthy", NUMANodes: []int64{0}, Holders: holders},
					{ID: mockGPU(2), Health: "Unhealthy", NUMANodes: []int64{1}},
					{ID: mockGPU(3), Health: "Healthy", NUMANodes: []int64{1}},
				}},
		},
		Pods: []statusapi.PagePod{
			{Namespace: "ml", Name: "inference", UID: "uid-inference", Phase: podresult.PhaseAdmitted,
				Containers: []statusapi.PageContainer{{Name: "warmup", Init: true}, {Name: "server"}}},
			{Namespace: "ml", Name: "big", UID: "uid-big", Phase: podresult.PhaseRejected, Reason: "UnexpectedAdmissionError",
				Message:    "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 8, Available: 1, which is unexpected",
				Containers: []statusapi.PageContainer{{Name: "main"}}},
			// A waiting pod carries the agent's reason too; the table shows the wait instead.
			{Namespace: "ml", Name: "later", UID: "uid-later", Phase: podresult.PhasePending, Reason: "WaitingForDevicePlugin",
				Waiting:    &statusapi.PageWait{Container: "main", Resource: "example.com/fpga", Deadline: now.Add(100 * time.Second)},
				Containers: []statusapi.PageContainer{{Name: "main"}}},
		},
	}
	pr := &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Namespace: "ml", Name: "inference", Containers: []*podresourcesv1.ContainerResources{{Name: "server",
			Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{mockGPU(1), mockGPU(0)},
				Topology: &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: 0}}}}}}}},
		{Namespace: "default", Name: "no-devices", Containers: []*podresourcesv1.ContainerResources{{Name: "main"}}},
	}}
	return pr, st
}

// disagreeing is st after a start that found a stale checkpoint: it had nothing for one
// container, whose recorded GPU it gave to a pod that is gone, and another GPU for a second.
func disagreeing(st *statusapi.PageState) *statusapi.PageState {
	out := *st
	out.RecordDisagreements = []statusapi.PageDisagreement{
		{Pod: "ml/inference", Container: "server", Resource: "nvidia.com/gpu", Recorded: []string{mockGPU(0), mockGPU(1)},
			HeldByOthers: []string{"6f1c2a9e-0000-4000-8000-0000000000ff"}, Kept: true},
		{Pod: "ml/inference", Container: "warmup", Resource: "nvidia.com/gpu", Recorded: []string{mockGPU(0), mockGPU(1)},
			Checkpointed: []string{mockGPU(3)}, Kept: true},
	}
	return &out
}

// TestGetTables: each `kdm get` kind prints what an operator looks for (pods: namespace/name,
// status with the rejection reason or the wait, container, resource, every device ID in full;
// devices: health, NUMA, holders, and a condition line per container whose checkpoint and
// record disagreed at start; resources: capacity, allocatable, in use, free, unhealthy;
// plugins: state, grace left, socket), and the same facts as a versioned JSON document. Golden.
func TestGetTables(t *testing.T) {
	pr, st := getFixture()
	for _, tc := range []struct {
		kind string
		list getList
	}{
		{"pods", newPodList(pr, st)},
		{"pods-without-state", newPodList(pr, nil)},
		{"devices", newDeviceList(st)},
		{"devices-disagreeing", newDeviceList(disagreeing(st))},
		{"resources", newResourceList(st)},
		{"plugins", newPluginList(st)},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			var table bytes.Buffer
			tc.list.printTable(&table)
			checkGolden(t, "get/"+tc.kind+".table", table.String())
			js, err := json.MarshalIndent(tc.list, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, "get/"+tc.kind+".json", string(js)+"\n")
		})
	}
}

// TestGetFromServers runs `kdm get` against a real podresources server on a unix socket and a
// real HTTP server, and checks what reaches the output: flags, the --healthz-bind-address
// alias, and a clear failure (exit 1) when kdm is not there.
func TestGetFromServers(t *testing.T) {
	pr, st := getFixture()
	root := t.TempDir()
	sock := filepath.Join(root, "pod-resources", "kubelet.sock")
	servePodResources(t, sock, pr)
	addr := serveState(t, st)

	var out, errOut bytes.Buffer
	if code := run([]string{"get", "pods", "--root-dir", root, "--healthz-bind-address", addr}, &out, &errOut); code != 0 {
		t.Fatalf("kdm get pods: exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"ml         inference   Admitted", "Rejected: UnexpectedAdmissionError", mockGPU(0) + "," + mockGPU(1)} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("kdm get pods lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"get", "res", "-o", "json", "--address", "http://" + addr}, &out, &errOut); code != 0 {
		t.Fatalf("kdm get res -o json: exit %d: %s", code, errOut.String())
	}
	var res resourceList
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.APIVersion != getAPIVersion || res.Kind != "ResourceList" || len(res.Items) != 2 {
		t.Fatalf("kdm get res -o json: %v: %s", err, out.String())
	}

	// Pods are listed from podresources alone, with a warning, when the HTTP endpoint is away.
	out.Reset()
	errOut.Reset()
	if code := run([]string{"get", "pods", "--podresources-socket", sock, "--address", freeTCPAddr(t)}, &out, &errOut); code != 0 ||
		!strings.Contains(errOut.String(), "admission outcomes unknown") || !strings.Contains(out.String(), "inference") {
		t.Fatalf("kdm get pods without HTTP: exit %d, stderr %q, stdout:\n%s", code, errOut.String(), out.String())
	}
	errOut.Reset()
	if code := run([]string{"get", "plugins", "--address", freeTCPAddr(t)}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "is kdm running") {
		t.Fatalf("kdm get plugins without kdm: exit %d, stderr %q; want 1 asking whether kdm runs", code, errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"get", "pods", "--root-dir", t.TempDir(), "--timeout", "2s"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "podresources") {
		t.Fatalf("kdm get pods without a podresources socket: exit %d, stderr %q; want 1 naming the socket", code, errOut.String())
	}
}

// podResourcesServer answers List with a fixed response.
type podResourcesServer struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	resp *podresourcesv1.ListPodResourcesResponse
}

func (s *podResourcesServer) List(_ context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return s.resp, nil
}

// servePodResources serves resp on a unix socket at path until the test ends.
func servePodResources(t *testing.T, path string, resp *podresourcesv1.ListPodResourcesResponse) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, &podResourcesServer{resp: resp})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
}

// serveState serves st as kdm's /api/state on a loopback port until the test ends; it
// returns host:port.
func serveState(t *testing.T, st *statusapi.PageState) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(st) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return lis.Addr().String()
}

// freeTCPAddr returns a loopback address nothing listens on.
func freeTCPAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

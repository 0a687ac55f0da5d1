package podresources

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubelet/pkg/apis/podresources/v1alpha1"

	"github.com/kdm-project/kdm/podresources/podresourcestest"

	"github.com/kdm-project/kdm/internal/sockdir"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakePods struct {
	active, all []*v1.Pod
}

func (f *fakePods) GetActivePods() []*v1.Pod { return f.active }
func (f *fakePods) GetPods() []*v1.Pod       { return f.all }
func (f *fakePods) GetPodByName(ns, name string) (*v1.Pod, bool) {
	for _, p := range f.all {
		if p.Namespace == ns && p.Name == name {
			return p, true
		}
	}
	return nil, false
}

type fakeDevices struct {
	byContainer map[string][]*podresourcesv1.ContainerDevices // podUID/container
	allocatable []*podresourcesv1.ContainerDevices
	gcCalls     atomic.Int32
}

func (f *fakeDevices) UpdateAllocatedDevices() { f.gcCalls.Add(1) }
func (f *fakeDevices) GetDevices(uid, c string) []*podresourcesv1.ContainerDevices {
	return f.byContainer[uid+"/"+c]
}
func (f *fakeDevices) GetAllocatableDevices() []*podresourcesv1.ContainerDevices {
	return f.allocatable
}

type fakeCPUs struct{}

func (fakeCPUs) GetCPUs(uid, c string) []int64 { return []int64{int64(len(uid + c))} }
func (fakeCPUs) GetAllocatableCPUs() []int64   { return []int64{0, 1, 2, 3} }

type fakeMemory struct{}

func (fakeMemory) GetMemory(string, string) []*podresourcesv1.ContainerMemory {
	return []*podresourcesv1.ContainerMemory{{MemoryType: "memory", Size: 1 << 20}}
}
func (fakeMemory) GetAllocatableMemory() []*podresourcesv1.ContainerMemory {
	return []*podresourcesv1.ContainerMemory{{MemoryType: "memory", Size: 1 << 30}}
}

type fakeDRA struct{}

func (fakeDRA) GetDynamicResources(pod *v1.Pod, c *v1.Container) []*podresourcesv1.DynamicResource {
	return []*podresourcesv1.DynamicResource{{ClaimName: pod.Name + "-" + c.Name}}
}

func pod(name, uid string, apps ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(uid)}}
	for _, a := range apps {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: a})
	}
	return p
}

func dev(res, id string, nodes ...int64) *podresourcesv1.ContainerDevices {
	d := &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: []string{id}}
	if len(nodes) > 0 {
		d.Topology = &podresourcesv1.TopologyInfo{}
		for _, n := range nodes {
			d.Topology.Nodes = append(d.Topology.Nodes, &podresourcesv1.NUMANode{ID: n})
		}
	}
	return d
}

func TestListPodResourcesV1(t *testing.T) {
	withDevs := pod("gpu-pod", "u1", "c")
	plain := pod("plain", "u2", "c")
	devs := &fakeDevices{byContainer: map[string][]*podresourcesv1.ContainerDevices{"u1/c": {dev("example.com/gpu", "g0", 0)}}}
	cases := []struct {
		name      string
		providers Providers
		pods      []*v1.Pod
		want      *podresourcesv1.ListPodResourcesResponse
	}{
		{"no pods", Providers{Devices: devs}, nil, &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{}}},
		{"pod without devices", Providers{Devices: devs}, []*v1.Pod{plain}, &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
			{Name: "plain", Namespace: "ns", Containers: []*podresourcesv1.ContainerResources{{Name: "c"}}}}}},
		{"devices, CPUs and memory", Providers{Devices: devs, CPUs: fakeCPUs{}, Memory: fakeMemory{}}, []*v1.Pod{withDevs},
			&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{Name: "gpu-pod", Namespace: "ns",
				Containers: []*podresourcesv1.ContainerResources{{Name: "c", Devices: []*podresourcesv1.ContainerDevices{dev("example.com/gpu", "g0", 0)},
					CpuIds: []int64{3}, Memory: []*podresourcesv1.ContainerMemory{{MemoryType: "memory", Size: 1 << 20}}}}}}}},
		{"dynamic resources and devices", Providers{Devices: devs, DynamicResources: fakeDRA{}}, []*v1.Pod{withDevs},
			&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{Name: "gpu-pod", Namespace: "ns",
				Containers: []*podresourcesv1.ContainerResources{{Name: "c", Devices: []*podresourcesv1.ContainerDevices{dev("example.com/gpu", "g0", 0)},
					DynamicResources: []*podresourcesv1.DynamicResource{{ClaimName: "gpu-pod-c"}}}}}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.providers.Pods = &fakePods{active: tc.pods, all: tc.pods}
			s, err := NewV1Server(tc.providers)
			if err != nil {
				t.Fatal(err)
			}
			before := devs.gcCalls.Load()
			got, err := s.List(context.Background(), &podresourcesv1.ListPodResourcesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Fatalf("List (-want +got):\n%s", diff)
			}
			if devs.gcCalls.Load() != before+1 {
				t.Fatalf("List did not garbage-collect devices exactly once")
			}
		})
	}
}

func TestListPodResourcesUsesOnlyActivePodsV1(t *testing.T) {
	active, ended := pod("active", "u1", "c"), pod("ended", "u2", "c")
	s, _ := NewV1Server(Providers{Pods: &fakePods{active: []*v1.Pod{active}, all: []*v1.Pod{active, ended}}, Devices: &fakeDevices{}})
	got, _ := s.List(context.Background(), &podresourcesv1.ListPodResourcesRequest{})
	if len(got.PodResources) != 1 || got.PodResources[0].Name != "active" {
		t.Fatalf("List returned %v, want only the active pod", got.PodResources)
	}
}

func withInits(p *v1.Pod) *v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	p.Spec.InitContainers = []v1.Container{{Name: "init"}, {Name: "sidecar", RestartPolicy: &always}}
	return p
}

func containerNames(pr *podresourcesv1.PodResources) []string {
	var out []string
	for _, c := range pr.Containers {
		out = append(out, c.Name)
	}
	return out
}

func TestInitContainersV1(t *testing.T) {
	p := withInits(pod("p", "u1", "app1", "app2"))
	s, _ := NewV1Server(Providers{Pods: &fakePods{active: []*v1.Pod{p}, all: []*v1.Pod{p}}, Devices: &fakeDevices{}})
	want := []string{"sidecar", "app1", "app2"}
	list, _ := s.List(context.Background(), &podresourcesv1.ListPodResourcesRequest{})
	if got := containerNames(list.PodResources[0]); !cmp.Equal(got, want) {
		t.Fatalf("List containers %v, want %v (regular init omitted, sidecars first)", got, want)
	}
	get, err := s.Get(context.Background(), &podresourcesv1.GetPodResourcesRequest{PodName: "p", PodNamespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	if got := containerNames(get.PodResources); !cmp.Equal(got, want) {
		t.Fatalf("Get containers %v, want %v", got, want)
	}
}

func TestAllocatableResources(t *testing.T) {
	devs := []*podresourcesv1.ContainerDevices{dev("r", "a"), dev("r", "b", 0), dev("r", "b", 1)}
	cases := []struct {
		name string
		p    Providers
		want *podresourcesv1.AllocatableResourcesResponse
	}{
		{"nothing", Providers{Devices: &fakeDevices{}}, &podresourcesv1.AllocatableResourcesResponse{}},
		{"CPUs", Providers{Devices: &fakeDevices{}, CPUs: fakeCPUs{}}, &podresourcesv1.AllocatableResourcesResponse{CpuIds: []int64{0, 1, 2, 3}}},
		{"memory only", Providers{Devices: &fakeDevices{}, Memory: fakeMemory{}}, &podresourcesv1.AllocatableResourcesResponse{Memory: []*podresourcesv1.ContainerMemory{{MemoryType: "memory", Size: 1 << 30}}}},
		{"devices with and without topology", Providers{Devices: &fakeDevices{allocatable: devs}, CPUs: fakeCPUs{}},
			&podresourcesv1.AllocatableResourcesResponse{Devices: devs, CpuIds: []int64{0, 1, 2, 3}}},
	}
	for _, tc := range cases {
		tc.p.Pods = &fakePods{}
		s, _ := NewV1Server(tc.p)
		got, err := s.GetAllocatableResources(context.Background(), &podresourcesv1.AllocatableResourcesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestGetPodResourcesV1(t *testing.T) {
	p := pod("gpu-pod", "u1", "c")
	ended := pod("ended", "u2", "c")
	ended.Status.Phase = v1.PodSucceeded
	devs := &fakeDevices{byContainer: map[string][]*podresourcesv1.ContainerDevices{"u1/c": {dev("example.com/gpu", "g0")}}}
	s, _ := NewV1Server(Providers{Pods: &fakePods{all: []*v1.Pod{p, ended}}, Devices: devs})
	for _, name := range []string{"missing", "ended"} {
		_, err := s.Get(context.Background(), &podresourcesv1.GetPodResourcesRequest{PodName: name, PodNamespace: "ns"})
		if want := fmt.Sprintf("pod %s in namespace ns not found", name); err == nil || err.Error() != want {
			t.Errorf("Get %s: got %v, want %q", name, err, want)
		}
	}
	got, err := s.Get(context.Background(), &podresourcesv1.GetPodResourcesRequest{PodName: "gpu-pod", PodNamespace: "ns"})
	if err != nil || len(got.PodResources.Containers[0].Devices) != 1 {
		t.Fatalf("Get gpu-pod: %v, %v", got, err)
	}
	if devs.gcCalls.Load() != 0 {
		t.Fatalf("Get garbage-collected devices")
	}
}

func TestListPodResourcesV1alpha1(t *testing.T) {
	p := withInits(pod("p", "u1", "app"))
	ended := pod("ended", "u2", "c")
	devs := &fakeDevices{byContainer: map[string][]*podresourcesv1.ContainerDevices{"u1/app": {dev("example.com/gpu", "g0", 0)}}}
	s, _ := NewV1alpha1Server(Providers{Pods: &fakePods{active: []*v1.Pod{p}, all: []*v1.Pod{p, ended}}, Devices: devs})
	got, _ := s.List(context.Background(), &v1alpha1.ListPodResourcesRequest{})
	want := &v1alpha1.ListPodResourcesResponse{PodResources: []*v1alpha1.PodResources{
		{Name: "p", Namespace: "ns", Containers: []*v1alpha1.ContainerResources{{Name: "app", Devices: []*v1alpha1.ContainerDevices{{ResourceName: "example.com/gpu", DeviceIds: []string{"g0"}}}}}},
		{Name: "ended", Namespace: "ns", Containers: []*v1alpha1.ContainerResources{{Name: "c"}}},
	}}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Fatalf("v1alpha1 List (-want +got):\n%s", diff)
	}
}

func TestFlatten(t *testing.T) {
	got := Flatten(map[string]map[string][]int64{"r": {"b": {1, 0}, "a": {}}, "q": {"x": nil}})
	want := []*podresourcesv1.ContainerDevices{dev("q", "x"), dev("r", "a"), dev("r", "b", 0), dev("r", "b", 1)}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Fatalf("Flatten (-want +got):\n%s", diff)
	}
}

// shortDir is a temp dir short enough for unix socket paths.
var shortDir = sockdir.New

// serve runs srv on a socket under a temp root and returns a connected client.
func serve(t testing.TB, srv *Server) (*grpc.ClientConn, string) {
	t.Helper()
	sock := SocketPath(shortDir(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, sock) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, sock
}

func TestServeOverSocket(t *testing.T) {
	p := pod("p", "u1", "c")
	devs := &fakeDevices{byContainer: map[string][]*podresourcesv1.ContainerDevices{"u1/c": {dev("example.com/gpu", "g0")}}}
	reg := prometheus.NewRegistry()
	srv, err := NewServer(ServerConfig{Providers: Providers{Pods: &fakePods{active: []*v1.Pod{p}, all: []*v1.Pod{p}}, Devices: devs}, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	conn, sock := serve(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v1c := podresourcesv1.NewPodResourcesListerClient(conn)
	list, err := v1c.List(ctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
	if err != nil || len(list.PodResources) != 1 {
		t.Fatalf("v1 List over the socket: %v, %v", list, err)
	}
	if _, err := v1c.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = v1c.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: "nope", PodNamespace: "ns"})
	if status.Code(err) == codes.OK {
		t.Fatalf("Get of a missing pod succeeded")
	}
	alpha, err := v1alpha1.NewPodResourcesListerClient(conn).List(ctx, &v1alpha1.ListPodResourcesRequest{})
	if err != nil || len(alpha.PodResources) != 1 {
		t.Fatalf("v1alpha1 List over the socket: %v, %v", alpha, err)
	}
	for name, want := range map[string]float64{
		`kubelet_pod_resources_endpoint_requests_total{server_api_version="v1"}`:           3,
		`kubelet_pod_resources_endpoint_requests_total{server_api_version="v1alpha1"}`:     1,
		`kubelet_pod_resources_endpoint_requests_list{server_api_version="v1"}`:            1,
		`kubelet_pod_resources_endpoint_requests_get_allocatable{server_api_version="v1"}`: 1,
		`kubelet_pod_resources_endpoint_requests_get{server_api_version="v1"}`:             1,
		`kubelet_pod_resources_endpoint_errors_get{server_api_version="v1"}`:               1,
	} {
		if got := metricValue(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("socket dir mode: %v, %v", fi.Mode(), err)
	}
}

func metricValue(t *testing.T, reg *prometheus.Registry, series string) float64 {
	t.Helper()
	name, labels, _ := strings.Cut(series, "{")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			var parts []string
			for _, l := range m.Label {
				parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if strings.Join(parts, ",")+"}" == labels {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestListenReplacesOldSocket(t *testing.T) {
	root := shortDir(t)
	sock := SocketPath(root)
	if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sock, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	lis, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("%s is not a socket after Listen: %v", sock, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(sock))
	if len(entries) != 1 {
		t.Fatalf("temporary socket left behind: %v", entries)
	}
	_ = lis.Close()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket not removed on Close: %v", err)
	}
}

func bigProviders(pods int) Providers {
	fp := &fakePods{}
	fd := &fakeDevices{byContainer: map[string][]*podresourcesv1.ContainerDevices{}}
	for i := 0; i < pods; i++ {
		uid := fmt.Sprintf("u%d", i)
		p := pod(fmt.Sprintf("p%d", i), uid, "c")
		fp.active, fp.all = append(fp.active, p), append(fp.all, p)
		for d := 0; d < 4; d++ {
			fd.byContainer[uid+"/c"] = append(fd.byContainer[uid+"/c"], dev("nvidia.com/gpu", fmt.Sprintf("GPU-%d-%d", i, d), int64(d%2)))
		}
	}
	return Providers{Pods: fp, Devices: fd}
}

// TestRateLimitUnderLoad: 8 clients make 1,000 List calls against 110 pods x 4 devices. Calls
// beyond the bucket get ResourceExhausted, nothing gets any other error, and every success is
// complete. The rate is set far below the kubelet's 100/s so that the bucket runs dry however
// slowly the machine serves the calls.
func TestRateLimitUnderLoad(t *testing.T) {
	srv, err := NewServer(ServerConfig{Providers: bigProviders(110), QPS: 5, Burst: DefaultBurst})
	if err != nil {
		t.Fatal(err)
	}
	conn, _ := serve(t, srv)
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	var ok, limited atomic.Int32
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 125; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := client.List(ctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
				cancel()
				switch {
				case err == nil && len(resp.PodResources) == 110 && len(resp.PodResources[0].Containers[0].Devices) == 4:
					ok.Add(1)
				case status.Code(err) == codes.ResourceExhausted && status.Convert(err).Message() == "rejected by rate limit":
					limited.Add(1)
				default:
					errs <- fmt.Errorf("unexpected result: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if ok.Load()+limited.Load() != 1000 || limited.Load() == 0 || ok.Load() < 10 {
		t.Fatalf("%d ok, %d rate limited of 1000", ok.Load(), limited.Load())
	}
	t.Logf("%d served, %d rate limited", ok.Load(), limited.Load())
}

func BenchmarkList(b *testing.B) {
	b.Run("pods=110", func(b *testing.B) {
		s, _ := NewV1Server(bigProviders(110))
		for i := 0; i < b.N; i++ {
			if _, err := s.List(context.Background(), &podresourcesv1.ListPodResourcesRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pods=110/socket", func(b *testing.B) {
		srv, _ := NewServer(ServerConfig{Providers: bigProviders(110), QPS: -1, Logger: klog.LoggerWithName(klog.Background(), "bench").V(10)})
		conn, _ := serve(b, srv)
		client := podresourcesv1.NewPodResourcesListerClient(conn)
		if _, err := client.List(context.Background(), &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true)); err != nil {
			b.Fatal(err) // connect before timing
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := client.List(context.Background(), &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// signalPods reports every GetActivePods call on listed, so a test knows a List handler ran.
type signalPods struct {
	fakePods
	listed chan struct{}
}

func (s *signalPods) GetActivePods() []*v1.Pod {
	select {
	case s.listed <- struct{}{}:
	default:
	}
	return s.fakePods.GetActivePods()
}

// stalledClient opens a connection to the podresources socket that starts v1 List calls on the
// given number of streams and never accepts their responses (see
// podresourcestest.StartStalledLists): the streams stay open until the server gives up on them.
// The returned func closes the connection.
func stalledClient(t *testing.T, sock string, streams int) func() {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dialing %s: %v", sock, err)
	}
	if _, err := podresourcestest.StartStalledLists(conn, streams); err != nil {
		_ = conn.Close()
		t.Fatalf("stalled client: %v", err)
	}
	return func() { _ = conn.Close() }
}

// TestServeReturnsDespiteStalledClients checks that a client which never accepts a response
// cannot keep Serve from returning once its context ends: the graceful stop is bounded and
// followed by a hard stop.
func TestServeReturnsDespiteStalledClients(t *testing.T) {
	p := pod("p", "u1", "c")
	pods := &signalPods{fakePods: fakePods{active: []*v1.Pod{p}, all: []*v1.Pod{p}}, listed: make(chan struct{}, 1)}
	srv, err := NewServer(ServerConfig{Providers: Providers{Pods: pods, Devices: &fakeDevices{}}, GracefulStopTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sock := SocketPath(shortDir(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, sock) }()
	if err := waitForSocket(sock, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		defer stalledClient(t, sock, 4)()
	}
	select {
	case <-pods.listed:
	case <-time.After(10 * time.Second):
		t.Fatal("no List call reached the server")
	}
	cancel()
	bound := time.NewTimer(15 * time.Second)
	defer bound.Stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-bound.C:
		t.Fatal("Serve did not return within 15s of its context ending while clients stalled their streams")
	}
}

// waitForSocket waits until something accepts connections on path.
func waitForSocket(path string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("socket %s not accepting connections after %v: %w", path, within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// brokenListener fails every Accept with a permanent error, as a listener whose socket was
// closed under it does.
type brokenListener struct{ net.Listener }

var errBrokenListener = errors.New("listener broken")

func (brokenListener) Accept() (net.Conn, error) { return nil, errBrokenListener }

// TestServeReturnsWhenGRPCFails checks that Serve does not wait for its context once gRPC's
// Serve has failed on its own, and reports the failure.
func TestServeReturnsWhenGRPCFails(t *testing.T) {
	srv, err := NewServer(ServerConfig{Providers: Providers{Pods: &fakePods{}, Devices: &fakeDevices{}}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", filepath.Join(shortDir(t), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.serve(context.Background(), brokenListener{lis}) }()
	bound := time.NewTimer(10 * time.Second)
	defer bound.Stop()
	select {
	case err := <-done:
		if !errors.Is(err, errBrokenListener) {
			t.Errorf("Serve returned %v, want an error wrapping %v", err, errBrokenListener)
		}
	case <-bound.C:
		t.Fatal("Serve did not return within 10s of gRPC failing with a live context")
	}
}

// TestGracefulStopLetsCallsFinish checks that a stop leaves a call in progress time to
// complete and deliver its response when the client reads it.
func TestGracefulStopLetsCallsFinish(t *testing.T) {
	p := pod("p", "u1", "c")
	release := make(chan struct{})
	pods := &blockingPods{fakePods: fakePods{active: []*v1.Pod{p}, all: []*v1.Pod{p}}, entered: make(chan struct{}, 1), release: release}
	srv, err := NewServer(ServerConfig{Providers: Providers{Pods: pods, Devices: &fakeDevices{}}, GracefulStopTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sock := SocketPath(shortDir(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, sock) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	listed := make(chan error, 1)
	go func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ccancel()
		resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(cctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
		if err == nil && len(resp.PodResources) != 1 {
			err = fmt.Errorf("got %d pods, want 1", len(resp.PodResources))
		}
		listed <- err
	}()
	select {
	case <-pods.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("List never reached the server")
	}
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Serve returned (%v) while a call was still in progress", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-listed; err != nil {
		t.Errorf("List in progress during a graceful stop: %v", err)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// blockingPods holds GetActivePods until release is closed, announcing each call on entered.
type blockingPods struct {
	fakePods
	entered chan struct{}
	release chan struct{}
}

func (b *blockingPods) GetActivePods() []*v1.Pod {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.release
	return b.fakePods.GetActivePods()
}

package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent/internal/apitest"
	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
	"github.com/kdm-project/kdm/internal/containerdtest"

	"github.com/kdm-project/kdm/agent/statusapi"
)

// TestContainersWaitForTheSources: with a container runtime, the pods of the API server run as
// containers and their Pod status is the runtime's; after a restart during which the API server
// does not answer, the runtime leaves the running container alone (the pod is merely not listed
// yet, not removed) and adopts it once the listing comes.
func TestContainersWaitForTheSources(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a containerd; run without -short")
	}
	ctd := containerdtest.Start(t)
	probe, sandbox := containerdtest.ImportProbe(t, ctd)
	crt := ctd.Dial(t)
	pod := fakePod("default", "worker", "edge-1", 0, 1)
	pod.Spec.Containers[0].Image = probe
	api := apitest.NewFakeAPI(pod)
	f := newFixture(t)
	cfg := Config{KubeClient: api, NodeName: "edge-1", ContainerRuntimeEndpoint: ctd.Endpoint(), SandboxImage: sandbox}

	first, stop := f.runWith(cfg)
	f.plugin("g0", "g1")
	f.waitFor(first, "worker running", runtimePhase("worker", v1.PodRunning))
	waitPod(t, api, "default", "worker", "a Running status from the runtime", func(p *v1.Pod, err error) bool {
		return err == nil && p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
			p.Status.ContainerStatuses[0].State.Running != nil && p.Status.ContainerStatuses[0].ContainerID != ""
	})
	id := runningContainer(t, crt, pod.UID)
	node, err := api.CoreV1().Nodes().Get(context.Background(), "edge-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(v, "containerd://1.") {
		t.Errorf("the Node's nodeInfo.containerRuntimeVersion is %q; want containerd://<version>", v)
	}
	stop()
	if got := runningContainer(t, crt, pod.UID); got != id {
		t.Fatalf("stopping kdm changed the container: %s, was %s", got, id)
	}

	api.Fail("list", "pods", errors.New("the API server is down"))
	second, _ := f.runWith(cfg)
	time.Sleep(3 * time.Second) // three runtime syncs while the pod source has not listed
	if got := runningContainer(t, crt, pod.UID); got != id {
		t.Fatalf("while the API server did not answer, the worker's container became %q; it was %s", got, id)
	}
	api.Fail("list", "pods", nil)
	f.waitFor(second, "worker running after the restart", runtimePhase("worker", v1.PodRunning))
	if got := runningContainer(t, crt, pod.UID); got != id {
		t.Fatalf("after the restart the worker's container is %q; it was %s", got, id)
	}
}

// runtimePhase holds when the runtime reports the named pod in that phase.
func runtimePhase(name string, want v1.PodPhase) func(statusapi.NodeStatus) bool {
	return func(st statusapi.NodeStatus) bool {
		p := phase(st, name)
		return p != nil && p.Runtime != nil && p.Runtime.ContainersRun && p.Runtime.Phase == want
	}
}

// runningContainer is the ID of the pod's running container in the runtime, "" when none runs.
func runningContainer(t *testing.T, rt cri.RuntimeServiceClient, uid types.UID) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rt.ListContainers(ctx, &cri.ListContainersRequest{Filter: &cri.ContainerFilter{
		State:         &cri.ContainerStateValue{State: cri.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(uid)}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Containers) != 1 {
		return ""
	}
	return resp.Containers[0].Id
}

// TestPreStartBeforeEachContainerStart: with a container runtime, a plugin that asks for
// PreStartContainer gets it before each start of the container, restarts included, and not at
// admission: as many calls as starts.
func TestPreStartBeforeEachContainerStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a containerd; run without -short")
	}
	ctd := containerdtest.Start(t)
	probe, sandbox := containerdtest.ImportProbe(t, ctd)
	f := newFixture(t)
	a, _ := f.runWith(Config{PodManifestPath: f.pods, ContainerRuntimeEndpoint: ctd.Endpoint(), SandboxImage: sandbox})
	plugin, err := plugintest.New(deviceplugin.Config{ResourceName: "example.com/gpu", PluginDir: f.plugins,
		Devices: []*pluginapi.Device{{ID: "g0", Health: pluginapi.Healthy}},
		Options: &pluginapi.DevicePluginOptions{PreStartRequired: true},
		Logger:  ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1)))}, plugintest.RecordRequests())
	if err != nil {
		t.Fatal(err)
	}
	if err := plugin.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plugin.Stop)
	f.waitFor(a, "1 device", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 1 })

	// The container exits 1 at once: restarted at once, then held in the crash back-off (10 s).
	body := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: crashing\nspec:\n  containers:\n  - name: main\n    image: " + probe +
		"\n    env:\n    - name: PROBE_EXIT\n      value: \"1\"\n    resources:\n      limits:\n        example.com/gpu: 1\n"
	if err := os.WriteFile(filepath.Join(f.pods, "crashing.yaml"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	st := f.waitFor(a, "crashing restarted once and backing off", func(st statusapi.NodeStatus) bool {
		p := phase(st, "crashing")
		if p == nil || p.Runtime == nil || len(p.Runtime.ContainerStatuses) != 1 {
			return false
		}
		cs := p.Runtime.ContainerStatuses[0]
		return cs.RestartCount == 1 && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff"
	})
	starts := int(phase(st, "crashing").Runtime.ContainerStatuses[0].RestartCount) + 1
	calls := plugin.Calls().PreStart
	if len(calls) != starts {
		t.Fatalf("PreStartContainer was called %d times for %d starts of the container; want one call per start", len(calls), starts)
	}
	for _, c := range calls {
		if len(c.DevicesIds) != 1 || c.DevicesIds[0] != "g0" {
			t.Errorf("PreStartContainer for %v; want [g0]", c.DevicesIds)
		}
	}
}

// TestPodPutBackWhileItsContainersStop: a manifest deleted and put back (same pod, same UID)
// while its container is still stopping keeps the pod: once the old container is gone, the
// pod is not released but runs again, with its result and its device.
func TestPodPutBackWhileItsContainersStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a containerd; run without -short")
	}
	ctd := containerdtest.Start(t)
	probe, sandbox := containerdtest.ImportProbe(t, ctd)
	crt := ctd.Dial(t)
	f := newFixture(t)
	a, _ := f.runWith(Config{PodManifestPath: f.pods, ContainerRuntimeEndpoint: ctd.Endpoint(), SandboxImage: sandbox})
	f.plugin("g0")
	f.waitFor(a, "1 device", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 1 })

	body := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: back\nspec:\n  terminationGracePeriodSeconds: 10\n  containers:\n  - name: main\n    image: " + probe +
		"\n    env:\n    - name: PROBE_TERM_DELAY\n      value: 2s\n    resources:\n      limits:\n        example.com/gpu: 1\n"
	path := filepath.Join(f.pods, "back.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	st := f.waitFor(a, "back running", runtimePhase("back", v1.PodRunning))
	uid := phase(st, "back").UID
	first := runningContainer(t, crt, uid)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !a.containers.isStopping(uid) {
		if time.Now().After(deadline) {
			t.Fatal("the deleted pod's containers were not asked to stop within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The runtime's stop begins at once; its container takes 2 s to stop. Put the pod back
	// within them.
	time.Sleep(300 * time.Millisecond)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	// A new container runs only in a sync after the one that removed the old container and
	// reported it stopped: whatever that report did is done by then.
	st = f.waitFor(a, "back running in a new container, no longer stopping", func(st statusapi.NodeStatus) bool {
		id := runningContainer(t, crt, uid)
		return runtimePhase("back", v1.PodRunning)(st) && id != "" && id != first && !a.containers.isStopping(uid)
	})
	if p := phase(st, "back"); p == nil || p.Phase != podresult.PhaseAdmitted {
		t.Fatalf("after its old container stopped, the pod put back has result %+v; want it admitted", p)
	}
	if got := a.Manager().GetDevices(string(uid), "main")["example.com/gpu"]; len(got) != 1 {
		t.Fatalf("the pod put back holds %v; want its device", got)
	}
	if _, err := os.Stat(podresult.Path(filepath.Join(f.root, "kdm", "pods"), podresult.PodOf(phase(st, "back")))); err != nil {
		t.Fatalf("the pod put back has no result file: %v", err)
	}
}

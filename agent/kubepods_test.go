package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kdm-project/kdm/agent/internal/apitest"
	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/e2e/kubecluster"
)

// testCluster is the package's real kube-apiserver and etcd, one node identity per test;
// TestMain stops it.
var testCluster = &kubecluster.Shared{
	ModuleDir: filepath.Join("..", "test", "kubebins"),
	Nodes:     []string{"api-pods", "api-pending"},
}

// gpuPod is a pod bound to node whose init container and app container each ask for GPUs.
func gpuPod(ns, name, node string, initGPUs, appGPUs int) *v1.Pod {
	c := func(cname string, n int) v1.Container {
		return v1.Container{Name: cname, Image: "x", Resources: v1.ResourceRequirements{
			Limits: apitest.Quantities("example.com/gpu", n)}}
	}
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{c("main", appGPUs)}}}
	if initGPUs > 0 {
		p.Spec.InitContainers = []v1.Container{c("setup", initGPUs)}
	}
	return p
}

// waitPod polls the pod until cond holds or 20 s pass.
func waitPod(t *testing.T, admin kubernetes.Interface, ns, name, what string, cond func(*v1.Pod, error) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, err := admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if cond(p, err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s: timed out waiting for %s; last %v err %v", ns, name, what, p.Status, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// apiServerNode skips the test under -short; otherwise it returns an admin client of the
// package's real API server and a client with the node's own identity, and removes the node's
// objects when the test ends.
func apiServerNode(t *testing.T, node string) (admin, nodeClient kubernetes.Interface) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real kube-apiserver and etcd; run by make test")
	}
	c := testCluster.Get(t)
	admin = apitest.AdminClient(t, c)
	nodeClient, err := c.Client("system:node:" + node)
	if err != nil {
		t.Fatal(err)
	}
	apitest.ForgetNode(t, admin, node)
	return admin, nodeClient
}

func running(p *v1.Pod, err error) bool { return err == nil && p.Status.Phase == v1.PodRunning }

// TestAPIServerPodSource runs the agent in process against the real API server: init
// containers' devices are reused by the app container, a pod that completes releases its
// devices, and a pod deleted and recreated under the same name is a new pod.
func TestAPIServerPodSource(t *testing.T) {
	admin, nodeClient := apiServerNode(t, "api-pods")
	ctx := context.Background()
	const ns = "default"
	f := newFixture(t)
	a, _ := f.runWith(Config{KubeClient: nodeClient, NodeName: "api-pods", NodeStatusUpdateFrequency: time.Second})
	f.plugin("g0", "g1", "g2", "g3")
	node := apitest.WaitNode(t, admin, "api-pods", "4 GPUs", apitest.Has("example.com/gpu", 4, 4))
	// What `kubectl get nodes -o wide` shows: Ready, the host's cpu and memory, OS, kernel,
	// version and an internal IP.
	if !apitest.NodeReady(node) {
		t.Errorf("node conditions %v: want Ready", node.Status.Conditions)
	}
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
		if q, ok := node.Status.Allocatable[name]; !ok || q.Sign() <= 0 {
			t.Errorf("allocatable %s = %v, want the host's", name, q.String())
		}
	}
	if info := node.Status.NodeInfo; info.OSImage == "" || info.KernelVersion == "" || info.KubeletVersion != ReportedVersion() {
		t.Errorf("nodeInfo %+v", info)
	}
	if len(node.Status.Addresses) == 0 || node.Status.Addresses[0].Type != v1.NodeInternalIP {
		t.Errorf("addresses %v, want an InternalIP", node.Status.Addresses)
	}
	if node.Labels[v1.LabelArchStable] == "" || node.Labels[v1.LabelOSStable] == "" || node.Labels[v1.LabelHostname] == "" {
		t.Errorf("labels %v", node.Labels)
	}

	// Init container 2, app container 4: the app reuses the init container's 2 and takes 2 more.
	created, err := admin.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, "init", "api-pods", 2, 4), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPod(t, admin, ns, "init", "Running", running)
	if p, err := admin.CoreV1().Pods(ns).Get(ctx, "init", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if cs := p.Status.ContainerStatuses; len(cs) != 1 || !cs[0].Ready || cs[0].State.Running == nil {
		t.Errorf("container statuses %+v: want main ready and running", cs)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		evs, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(created.UID) + ",reason=" + ReasonDevicesAssigned})
		if err == nil && len(evs.Items) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event for pod init: %v, %v", ReasonDevicesAssigned, evs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := a.manager.GetDevices(string(created.UID), "main")["example.com/gpu"]; len(got) != 4 {
		t.Fatalf("app container devices %v, want all 4", got)
	}

	// The pod completes (its runtime says so): its devices go back to the pool.
	done, err := admin.CoreV1().Pods(ns).Get(ctx, "init", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done.Status.Phase = v1.PodSucceeded
	if _, err := admin.CoreV1().Pods(ns).UpdateStatus(ctx, done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(a, "the completed pod released", func(st statusapi.NodeStatus) bool { return phase(st, "init") == nil })

	// Reused name: the first "again" takes all 4 GPUs; it is deleted, and its successor under
	// the same name (a new UID) gets them.
	first, err := admin.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, "again", "api-pods", 0, 4), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPod(t, admin, ns, "again", "Running", running)
	if err := admin.CoreV1().Pods(ns).Delete(ctx, "again", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, admin, ns, "again", "deleted by the node", func(_ *v1.Pod, err error) bool { return apierrors.IsNotFound(err) })
	second, err := admin.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, "again", "api-pods", 0, 4), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPod(t, admin, ns, "again", "Running again", func(p *v1.Pod, err error) bool {
		return running(p, err) && p.UID == second.UID
	})
	if got := a.manager.GetDevices(string(first.UID), "main"); len(got) != 0 {
		t.Errorf("deleted pod %s still holds %v", first.UID, got)
	}
	st := a.Status()
	if r := phase(st, "again"); r == nil || r.UID != second.UID || r.Phase != podresult.PhaseAdmitted {
		t.Errorf("status of the recreated pod: %+v", r)
	}
}

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kdm-project/kdm/agent"
	"github.com/kdm-project/kdm/agent/nodestatus"
	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/e2e/kubecluster"
)

// sharedCluster is the package's real kube-apiserver and etcd; TestMain stops it.
var sharedCluster = &kubecluster.Shared{ModuleDir: filepath.Join("..", "test", "kubebins"), Nodes: []string{"edge-1", "edge-2"}}

// clusterNode is a kdm node joined to the test cluster.
type clusterNode struct {
	*node
	name       string
	kubeconfig string
	admin      kubernetes.Interface
	ns         string
	kdmArgs    []string
}

func newClusterNode(t *testing.T, c *kubecluster.Cluster, name string) *clusterNode {
	t.Helper()
	n := newNode(t)
	kc := filepath.Join(n.base, "kubeconfig")
	if err := c.WriteKubeconfig("system:node:"+name, kc); err != nil {
		t.Fatal(err)
	}
	admin, err := c.Client(kubecluster.AdminUser)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := admin.CoreV1().Namespaces().Create(context.Background(), &v1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Leave the node as a fresh run finds it: without a kubelet nobody else removes its pods,
	// and the Node and its Lease would outlive the test.
	t.Cleanup(func() {
		ctx := context.Background()
		_ = admin.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		_ = admin.CoordinationV1().Leases(nodestatus.LeaseNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		_ = admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	})
	return &clusterNode{node: n, name: name, kubeconfig: kc, admin: admin, ns: ns.Name}
}

func (cn *clusterNode) startKdm() *process {
	return cn.node.startKdm(append([]string{"--kubeconfig", cn.kubeconfig, "--node-name", cn.name}, cn.kdmArgs...)...)
}

// createPod creates a pod bound to the node (as the scheduler would) asking for GPUs.
func (cn *clusterNode) createPod(name string, gpus int64) *v1.Pod {
	cn.t.Helper()
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cn.ns},
		Spec: v1.PodSpec{
			NodeName: cn.name,
			Containers: []v1.Container{{
				Name: "main", Image: "example.com/cuda",
				Resources: v1.ResourceRequirements{Limits: v1.ResourceList{"nvidia.com/gpu": q}},
			}},
		},
	}
	created, err := cn.admin.CoreV1().Pods(cn.ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		cn.t.Fatalf("creating pod %s: %v", name, err)
	}
	return created
}

// poll checks cond every 100 ms until it holds or 30 s pass; what names the wait.
func (cn *clusterNode) poll(what string, cond func() (bool, string)) {
	cn.t.Helper()
	pollAPI(cn.t, what, 30*time.Second, 100*time.Millisecond, cond)
}

// pollAPI checks cond, which asks the API server, every interval until it holds or timeout
// passes, and then fails the test naming what it waited for and the state cond last described.
func pollAPI(t *testing.T, what string, timeout, interval time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(interval)
	}
	t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
}

// waitGPUs waits until the Node publishes the given capacity and allocatable of nvidia.com/gpu.
func (cn *clusterNode) waitGPUs(capacity, allocatable int64) {
	cn.t.Helper()
	cn.poll(fmt.Sprintf("Node %s nvidia.com/gpu capacity %d allocatable %d", cn.name, capacity, allocatable), func() (bool, string) {
		node, err := cn.admin.CoreV1().Nodes().Get(context.Background(), cn.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c, a := node.Status.Capacity["nvidia.com/gpu"], node.Status.Allocatable["nvidia.com/gpu"]
		return c.Value() == capacity && a.Value() == allocatable, fmt.Sprintf("capacity %s allocatable %s", c.String(), a.String())
	})
}

// waitPhase waits for the pod's phase and returns the pod.
func (cn *clusterNode) waitPhase(name string, phase v1.PodPhase) *v1.Pod {
	cn.t.Helper()
	var pod *v1.Pod
	cn.poll(fmt.Sprintf("pod %s %s", name, phase), func() (bool, string) {
		p, err := cn.admin.CoreV1().Pods(cn.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return p.Status.Phase == phase, fmt.Sprintf("phase %q reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	})
	return pod
}

// gpusOf returns a pod's GPUs as podresources reports them.
func (cn *clusterNode) gpusOf(name string) []string {
	return sorted(cn.podResources()[name])
}

// TestJoinCluster runs `kdm run --kubeconfig --node-name edge-1` and the mock-GPU plugin against
// a real kube-apiserver and etcd, and walks the acceptance story: capacity on the Node, pods
// bound by the API admitted with disjoint GPUs, a rejection the kubelet's way, deletion freeing
// GPUs, a plugin crash, and a kdm crash that fails no running pod.
func TestJoinCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver and etcd; run by make test")
	}
	joinCluster(t, "edge-1")
}

// TestJoinClusterKDMPolicy walks the same story under --policy kdm, whose differences (deferred
// admission, RPC deadlines) must not change it.
func TestJoinClusterKDMPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver and etcd; run by make test")
	}
	joinCluster(t, "edge-2", "--policy", "kdm")
}

func joinCluster(t *testing.T, nodeName string, kdmArgs ...string) {
	c := sharedCluster.Get(t)
	cn := newClusterNode(t, c, nodeName)
	cn.kdmArgs = kdmArgs
	ctx := context.Background()
	pods := cn.admin.CoreV1().Pods(cn.ns)

	cn.startPlugin()
	kdm := cn.startKdm()
	cn.waitGPUs(8, 8)
	node, err := cn.admin.CoreV1().Nodes().Get(ctx, cn.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pods := node.Status.Allocatable[v1.ResourcePods]; pods.Value() != 110 {
		t.Errorf("Node allocatable pods %s, want the default --max-pods 110", pods.String())
	}
	lease, err := cn.admin.CoordinationV1().Leases(nodestatus.LeaseNamespace).Get(ctx, cn.name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != cn.name || lease.Spec.RenewTime == nil {
		t.Fatalf("node lease %+v: want holder %s and a renew time", lease.Spec, cn.name)
	}

	// Two pods of 3 GPUs each are admitted with disjoint GPUs.
	cn.createPod("train-a", 3)
	cn.createPod("train-b", 3)
	cn.waitPhase("train-a", v1.PodRunning)
	cn.waitPhase("train-b", v1.PodRunning)
	a, b := cn.gpusOf("train-a"), cn.gpusOf("train-b")
	if len(a) != 3 || len(b) != 3 {
		t.Fatalf("podresources: train-a %v, train-b %v; want 3 GPUs each", a, b)
	}
	disjointSets(t, map[string][]string{"train-a": a, "train-b": b})

	// A third pod of 3 finds only 2 free GPUs: rejected as the kubelet rejects it.
	cn.createPod("train-c", 3)
	failed := cn.waitPhase("train-c", v1.PodFailed)
	wantMsg := "Pod was rejected: Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 3, Available: 2, which is unexpected"
	if failed.Status.Reason != agent.ReasonUnexpectedAdmissionError || failed.Status.Message != wantMsg {
		t.Fatalf("train-c status reason %q message %q; want %q, %q", failed.Status.Reason, failed.Status.Message,
			agent.ReasonUnexpectedAdmissionError, wantMsg)
	}

	// Events are sent by a background broadcaster, so the pod's status can come first.
	var events *v1.EventList
	cn.poll("an event for train-c", func() (bool, string) {
		events, err = cn.admin.CoreV1().Events(cn.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=train-c"})
		return err == nil && len(events.Items) > 0, fmt.Sprint(err)
	})
	if len(events.Items) != 1 || events.Items[0].Type != v1.EventTypeWarning || events.Items[0].Reason != agent.ReasonUnexpectedAdmissionError {
		t.Fatalf("events of train-c: %+v; want one Warning %s", events.Items, agent.ReasonUnexpectedAdmissionError)
	}

	// Deleting train-a (default grace period) frees its GPUs: kdm releases them and finishes the
	// deletion, and a new pod is admitted onto them.
	if err := pods.Delete(ctx, "train-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cn.poll("train-a deleted by the node", func() (bool, string) {
		_, err := pods.Get(ctx, "train-a", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	cn.createPod("train-d", 3)
	cn.waitPhase("train-d", v1.PodRunning)
	d := cn.gpusOf("train-d")
	disjointSets(t, map[string][]string{"train-b": b, "train-d": d})
	if len(d) != 3 || !slices.ContainsFunc(d, func(id string) bool { return slices.Contains(a, id) }) {
		t.Fatalf("train-d got %v; want 3 GPUs including some of train-a's %v", d, a)
	}

	// The plugin is SIGKILLed: its GPUs turn unhealthy, allocatable drops to 0 while capacity
	// stays for the grace period; the plugin comes back and re-registers.
	cn.killPlugins()
	cn.waitGPUs(8, 0)
	cn.startPlugin()
	cn.waitGPUs(8, 8)

	// kdm is SIGKILLed and restarted, first with the plugin left running, then with the plugin
	// gone too (a node reboot): no running pod is failed, assignments are unchanged, and capacity
	// returns once the plugin registers.
	restart := func(probe string, pluginDown bool) {
		t.Helper()
		w, err := pods.Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		kdm.kill()
		killed := time.Now()
		if pluginDown {
			cn.killPlugins()
		}
		kdm = cn.startKdm()
		if pluginDown {
			// The running pods are re-admitted from the checkpoint while their plugin is away.
			cn.eventually("running pods re-admitted without their plugin", func(st statusapi.NodeStatus) bool {
				for _, name := range []string{"train-b", "train-d"} {
					if p := pod(st, name); p == nil || p.Phase != podresult.PhaseAdmitted || !p.Updated.After(killed) {
						return false
					}
				}
				return true
			})
			cn.startPlugin()
		}
		cn.eventually("the restarted kdm sees the plugin again", gpus(8))
		cn.poll("the restarted kdm renews the node lease", func() (bool, string) {
			l, err := cn.admin.CoordinationV1().Leases(nodestatus.LeaseNamespace).Get(ctx, cn.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return l.Spec.RenewTime.After(killed), l.Spec.RenewTime.String()
		})
		cn.waitGPUs(8, 8)
		if got := cn.gpusOf("train-b"); !slices.Equal(got, b) {
			t.Fatalf("train-b has %v after the kdm restart, had %v", got, b)
		}
		if got := cn.gpusOf("train-d"); !slices.Equal(got, d) {
			t.Fatalf("train-d has %v after the kdm restart, had %v", got, d)
		}
		// Re-admission of the first listing precedes anything new, and one worker publishes
		// pod status in order: once a pod created now runs, a wrong status for the old pods
		// would have been written. Watch events come in order: read them up to the probe
		// running.
		cn.createPod(probe, 1)
		cn.waitPhase(probe, v1.PodRunning)
		timeout := time.After(30 * time.Second)
		for caughtUp := false; !caughtUp; {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatal("pod watch closed")
				}
				p, ok := ev.Object.(*v1.Pod)
				switch {
				case !ok:
				case p.Name == probe:
					caughtUp = p.Status.Phase == v1.PodRunning
				case p.Name == "train-b" || p.Name == "train-d":
					if ev.Type == watch.Deleted || p.Status.Phase != v1.PodRunning {
						t.Fatalf("after the kdm restart pod %s: event %s phase %s reason %q message %q",
							p.Name, ev.Type, p.Status.Phase, p.Status.Reason, p.Status.Message)
					}
				}
			case <-timeout:
				t.Fatalf("pod watch did not deliver %s running within 30s", probe)
			}
		}
	}
	restart("after-restart", false)
	restart("after-reboot", true)
	for _, name := range []string{"train-b", "train-d"} {
		cn.waitPhase(name, v1.PodRunning)
	}
	kdm.terminate(t)
}

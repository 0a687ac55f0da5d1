package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/kdm-project/kdm/agent"
	"github.com/kdm-project/kdm/agent/nodestatus"
	"github.com/kdm-project/kdm/e2e/kubecluster"
)

// schedulerCluster is a second cluster with the real kube-scheduler and
// kube-controller-manager, kept apart from sharedCluster so that the node lifecycle controller
// and the scheduler never act on the nodes of the tests that bind pods themselves. TestMain
// stops it.
var schedulerCluster = &kubecluster.Shared{
	ModuleDir:    filepath.Join("..", "test", "kubebins"),
	Nodes:        []string{schedulerNode},
	ControlPlane: true,
}

const (
	schedulerNode = "gpu-1"
	// schedulerWait bounds each wait of the scheduler test: the scheduler retries an
	// unschedulable pod after a backoff of up to 10 s, and the test machine may be busy.
	schedulerWait = 90 * time.Second
	// nodePoolLabel is set through --node-labels.
	nodePoolLabel = "kdm.example.com/pool"
	// gpuTaintKey is registered through --register-with-taints, as GPU nodes often are;
	// the story's pods tolerate it unless they ask not to.
	gpuTaintKey = "kdm.example.com/gpu"
)

// gpuTaint is the taint the node registers with.
var gpuTaint = v1.Taint{Key: gpuTaintKey, Value: "true", Effect: v1.TaintEffectNoSchedule}

// systemReserved is passed as --system-reserved; allocatable must be capacity minus it.
var systemReserved = v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("100Mi")}

// TestSchedulerInTheLoop runs `kdm run` and the mock DGX A100 plugin against a real
// kube-apiserver, kube-scheduler and kube-controller-manager, and drives everything through
// the API only (the test never sets spec.nodeName): the scheduler places pods on what kdm
// publishes and kdm admits them with disjoint GPUs; the scheduler keeps the pod that does not
// fit Pending; a Deployment becomes available and, scaled past the GPUs, keeps its extra
// replicas Pending; a pod with cpu and memory requests and an architecture selector runs, one
// that does not tolerate the taint kdm registered the node with does not; a SIGKILLed and
// restarted kdm disturbs no pod.
func TestSchedulerInTheLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver, kube-scheduler, kube-controller-manager and etcd; run by make test")
	}
	c := schedulerCluster.Get(t)
	cn := newClusterNode(t, c, schedulerNode)
	st := &schedulerStory{clusterNode: cn}
	t.Cleanup(st.deleteWorkloads) // before newClusterNode's cleanup deletes the pods
	cn.kdmArgs = []string{"--logging-format=json", "--node-labels=" + nodePoolLabel + "=gpu", "--node-ip=127.0.0.1",
		"--register-with-taints=" + gpuTaintKey + "=true:NoSchedule", "--system-reserved=cpu=100m,memory=100Mi"}

	cn.startPlugin()
	kdm := cn.startKdm()
	cn.waitGPUs(8, 8)
	st.checkNode()
	st.checkReadyz()
	st.checkJSONLogs(kdm)

	// Three pods asking 3 GPUs each: the scheduler binds two, kdm admits them on disjoint
	// GPUs, and the third stays Pending for want of GPUs.
	for _, name := range []string{"train-a", "train-b", "train-c"} {
		st.createPod(name, gpuRequest(3))
	}
	running, pending := st.waitSplit([]string{"train-a", "train-b", "train-c"}, 2)
	st.waitUnschedulable(pending[0], "Insufficient nvidia.com/gpu")
	gpusBefore := map[string][]string{running[0]: cn.gpusOf(running[0]), running[1]: cn.gpusOf(running[1])}
	for name, ids := range gpusBefore {
		if len(ids) != 3 {
			t.Fatalf("podresources: %s holds %v, want 3 GPUs", name, ids)
		}
	}
	disjointSets(t, gpusBefore)

	// Deleting one running pod lets the scheduler bind the third, which kdm admits on GPUs the
	// other pod does not hold.
	gone, kept, third := running[0], running[1], pending[0]
	st.deletePod(gone)
	st.waitRunningReady(third)
	thirdGPUs := cn.gpusOf(third)
	if len(thirdGPUs) != 3 {
		t.Fatalf("podresources: %s holds %v after %s was deleted, want 3 GPUs", third, thirdGPUs, gone)
	}
	disjointSets(t, map[string][]string{kept: gpusBefore[kept], third: thirdGPUs})

	// A Deployment of 2 single-GPU replicas becomes available on the 2 GPUs left.
	st.createDeployment("infer", 2, gpuRequest(1))
	st.waitDeployment("infer", 2, 2)
	held := cn.podResources()
	if n := countGPUs(held); n != 8 {
		t.Fatalf("podresources after the Deployment: %d GPUs held, want 8: %v", n, held)
	}
	disjointSets(t, held)

	// Scaled past the GPUs, the Deployment keeps 2 available and 2 Pending replicas; kdm
	// never sees the Pending ones, and the node keeps all 8 GPUs allocatable.
	st.scaleDeployment("infer", 4)
	st.waitDeployment("infer", 4, 2)
	for _, name := range st.pendingPodsOf("infer", 2) {
		st.waitUnschedulable(name, "Insufficient nvidia.com/gpu")
	}

	// A pod asking cpu and memory, and selecting the node's architecture, runs beside them;
	// one selecting another architecture stays Pending.
	st.createPod("cpu-arch", cpuMemoryRequest("100m", "64Mi"), withNodeSelector(v1.LabelArchStable, runtime.GOARCH))
	st.waitRunningReady("cpu-arch")
	st.createPod("other-arch", cpuMemoryRequest("100m", "64Mi"), withNodeSelector(v1.LabelArchStable, otherArch()))
	st.waitUnschedulable("other-arch", "didn't match Pod's node affinity/selector")
	// A pod that does not tolerate the taint kdm registered the node with stays Pending.
	st.createPod("intolerant", cpuMemoryRequest("10m", "16Mi"), withoutTolerations())
	st.waitUnschedulable("intolerant", "untolerated taint")

	// kdm is SIGKILLed and restarted: no pod changes phase, node or GPUs, and the node stays
	// schedulable.
	kdm = st.restartKdmUndisturbed(kdm)
	kdm.terminate(t)
}

// schedulerStory is the scheduler test's API helpers, on one clusterNode.
type schedulerStory struct {
	*clusterNode
}

// podOption changes a pod the story creates.
type podOption func(*v1.PodSpec)

func gpuRequest(n int64) podOption {
	return func(s *v1.PodSpec) {
		s.Containers[0].Resources.Limits = v1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(n, resource.DecimalSI)}
	}
}

func cpuMemoryRequest(cpu, memory string) podOption {
	return func(s *v1.PodSpec) {
		s.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(memory)}
	}
}

func withNodeSelector(key, value string) podOption {
	return func(s *v1.PodSpec) { s.NodeSelector = map[string]string{key: value} }
}

func withoutTolerations() podOption {
	return func(s *v1.PodSpec) { s.Tolerations = nil }
}

// otherArch is an architecture the test machine is not.
func otherArch() string {
	if runtime.GOARCH == "s390x" {
		return "amd64"
	}
	return "s390x"
}

// podSpec is a one-container spec that names no node and tolerates gpuTaint.
func podSpec(opts ...podOption) v1.PodSpec {
	s := v1.PodSpec{
		Containers:                    []v1.Container{{Name: "main", Image: "example.com/cuda"}},
		TerminationGracePeriodSeconds: ptr.To[int64](5),
		Tolerations:                   []v1.Toleration{{Key: gpuTaintKey, Operator: v1.TolerationOpEqual, Value: "true", Effect: v1.TaintEffectNoSchedule}},
	}
	for _, o := range opts {
		o(&s)
	}
	return s
}

func (st *schedulerStory) createPod(name string, opts ...podOption) {
	st.t.Helper()
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: st.ns}, Spec: podSpec(opts...)}
	if _, err := st.admin.CoreV1().Pods(st.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		st.t.Fatalf("creating pod %s: %v", name, err)
	}
}

func (st *schedulerStory) deletePod(name string) {
	st.t.Helper()
	pods := st.admin.CoreV1().Pods(st.ns)
	if err := pods.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		st.t.Fatal(err)
	}
	st.waitFor(name+" deleted by the node", func() (bool, string) {
		_, err := pods.Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// waitFor polls cond every 200 ms for up to schedulerWait.
func (st *schedulerStory) waitFor(what string, cond func() (bool, string)) {
	st.t.Helper()
	pollAPI(st.t, what, schedulerWait, 200*time.Millisecond, cond)
}

// describe is a pod's state in one line, for failure messages.
func describe(p *v1.Pod) string {
	s := fmt.Sprintf("%s: node %q phase %q", p.Name, p.Spec.NodeName, p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Status != v1.ConditionTrue {
			s += fmt.Sprintf(" %s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	if p.Status.Reason != "" {
		s += fmt.Sprintf(" reason %q message %q", p.Status.Reason, p.Status.Message)
	}
	return s
}

// runningReady reports whether the pod runs on the test's node with its one container ready
// (READY 1/1).
func runningReady(p *v1.Pod) bool {
	if p.Spec.NodeName != schedulerNode || p.Status.Phase != v1.PodRunning {
		return false
	}
	ready := 0
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Ready {
			ready++
		}
	}
	cond := false
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			cond = c.Status == v1.ConditionTrue
		}
	}
	return cond && ready == len(p.Spec.Containers)
}

func (st *schedulerStory) waitRunningReady(name string) {
	st.t.Helper()
	st.waitFor(name+" Running and Ready 1/1 on "+schedulerNode, func() (bool, string) {
		p, err := st.admin.CoreV1().Pods(st.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return runningReady(p), describe(p)
	})
}

// waitSplit waits until want of the named pods run ready and the others are Pending without
// a node, and returns both groups, sorted.
func (st *schedulerStory) waitSplit(names []string, want int) (running, pending []string) {
	st.t.Helper()
	st.waitFor(fmt.Sprintf("%d of %v Running and Ready, the others Pending", want, names), func() (bool, string) {
		running, pending = nil, nil
		var states []string
		for _, name := range names {
			p, err := st.admin.CoreV1().Pods(st.ns).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			states = append(states, describe(p))
			switch {
			case runningReady(p):
				running = append(running, name)
			case p.Status.Phase == v1.PodPending && p.Spec.NodeName == "":
				pending = append(pending, name)
			}
		}
		return len(running) == want && len(pending) == len(names)-want, strings.Join(states, "; ")
	})
	return running, pending
}

// waitUnschedulable waits until the scheduler has marked the pod unschedulable with a
// message containing reason, and checks it is bound to no node.
func (st *schedulerStory) waitUnschedulable(name, reason string) {
	st.t.Helper()
	st.waitFor(name+" unschedulable: "+reason, func() (bool, string) {
		p, err := st.admin.CoreV1().Pods(st.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable &&
				strings.Contains(c.Message, reason) {
				return p.Spec.NodeName == "" && p.Status.Phase == v1.PodPending, describe(p)
			}
		}
		return false, describe(p)
	})
}

func (st *schedulerStory) createDeployment(name string, replicas int32, opts ...podOption) {
	st.t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: st.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec(opts...)},
		},
	}
	if _, err := st.admin.AppsV1().Deployments(st.ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		st.t.Fatalf("creating Deployment %s: %v", name, err)
	}
}

func (st *schedulerStory) scaleDeployment(name string, replicas int32) {
	st.t.Helper()
	deployments := st.admin.AppsV1().Deployments(st.ns)
	scale, err := deployments.GetScale(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		st.t.Fatal(err)
	}
	scale.Spec.Replicas = replicas
	if _, err := deployments.UpdateScale(context.Background(), name, scale, metav1.UpdateOptions{}); err != nil {
		st.t.Fatalf("scaling Deployment %s to %d: %v", name, replicas, err)
	}
}

// waitDeployment waits until the Deployment's controller reports replicas pods of which
// available are available.
func (st *schedulerStory) waitDeployment(name string, replicas, available int32) {
	st.t.Helper()
	st.waitFor(fmt.Sprintf("Deployment %s: %d replicas, %d available", name, replicas, available), func() (bool, string) {
		d, err := st.admin.AppsV1().Deployments(st.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := d.Status
		return s.ObservedGeneration == d.Generation && s.Replicas == replicas && s.AvailableReplicas == available &&
				s.UnavailableReplicas == replicas-available,
			fmt.Sprintf("generation %d observed %d replicas %d ready %d available %d unavailable %d", d.Generation,
				s.ObservedGeneration, s.Replicas, s.ReadyReplicas, s.AvailableReplicas, s.UnavailableReplicas)
	})
}

// pendingPodsOf returns the names of the Deployment's pods that no node holds; there must be
// want of them.
func (st *schedulerStory) pendingPodsOf(app string, want int) []string {
	st.t.Helper()
	list, err := st.admin.CoreV1().Pods(st.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		st.t.Fatal(err)
	}
	var pending []string
	for _, p := range list.Items {
		if p.Spec.NodeName == "" {
			pending = append(pending, p.Name)
		}
	}
	if len(pending) != want {
		st.t.Fatalf("Deployment %s: pods without a node %v, want %d", app, pending, want)
	}
	return pending
}

// deleteWorkloads removes the Deployments and ReplicaSets first, so that their controllers do
// not re-create the pods the node's cleanup deletes.
func (st *schedulerStory) deleteWorkloads() {
	ctx := context.Background()
	_ = st.admin.AppsV1().Deployments(st.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = st.admin.AppsV1().ReplicaSets(st.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}

func countGPUs(byPod map[string][]string) int {
	n := 0
	for _, ids := range byPod {
		n += len(ids)
	}
	return n
}

// checkNode checks, through client-go, the Node a scheduler relies on and `kubectl get nodes
// -o wide` shows: Ready, with the --register-with-taints taint and no node lifecycle taint,
// cpu, memory, pods and GPUs with allocatable less --system-reserved, the OS and architecture
// labels and --node-labels, nodeInfo, and --node-ip as the InternalIP.
func (st *schedulerStory) checkNode() {
	st.t.Helper()
	var node *v1.Node
	st.waitFor("Node "+schedulerNode+" Ready and schedulable", func() (bool, string) {
		n, err := st.admin.CoreV1().Nodes().Get(context.Background(), schedulerNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		node = n
		ready := false
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				ready = c.Status == v1.ConditionTrue
			}
		}
		taintsOK := len(n.Spec.Taints) == 1 && n.Spec.Taints[0].MatchTaint(&gpuTaint) && n.Spec.Taints[0].Value == gpuTaint.Value
		return ready && taintsOK && !n.Spec.Unschedulable,
			fmt.Sprintf("conditions %v taints %v (want only %v)", n.Status.Conditions, n.Spec.Taints, gpuTaint)
	})
	var problems []string
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourcePods, "nvidia.com/gpu"} {
		c, a := node.Status.Capacity[name], node.Status.Allocatable[name]
		if c.Sign() <= 0 || a.Sign() <= 0 {
			problems = append(problems, fmt.Sprintf("%s: capacity %s allocatable %s, want both positive", name, c.String(), a.String()))
			continue
		}
		if r, ok := systemReserved[name]; ok {
			want := c.DeepCopy()
			want.Sub(r)
			if a.Cmp(want) != 0 {
				problems = append(problems, fmt.Sprintf("%s: allocatable %s, want capacity %s less --system-reserved %s", name, a.String(), c.String(), r.String()))
			}
		}
	}
	for key, want := range map[string]string{
		v1.LabelArchStable: runtime.GOARCH, v1.LabelOSStable: runtime.GOOS, nodePoolLabel: "gpu",
	} {
		if got, ok := node.Labels[key]; !ok || got != want {
			problems = append(problems, fmt.Sprintf("label %s=%q, want %q", key, got, want))
		}
	}
	if node.Labels[v1.LabelHostname] == "" {
		problems = append(problems, "no label "+v1.LabelHostname)
	}
	info := node.Status.NodeInfo
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	for what, ok := range map[string]bool{
		"nodeInfo.operatingSystem " + info.OperatingSystem: info.OperatingSystem == runtime.GOOS,
		"nodeInfo.architecture " + info.Architecture:       info.Architecture == runtime.GOARCH,
		"nodeInfo.kernelVersion " + info.KernelVersion:     info.KernelVersion == strings.TrimSpace(string(kernel)),
		"nodeInfo.kubeletVersion " + info.KubeletVersion:   info.KubeletVersion == agent.ReportedVersion(),
		"nodeInfo.osImage " + info.OSImage:                 info.OSImage != "",
	} {
		if !ok {
			problems = append(problems, what+" is not what the host has")
		}
	}
	if !slices.Contains(node.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: "127.0.0.1"}) {
		problems = append(problems, fmt.Sprintf("addresses %v, want InternalIP 127.0.0.1 (--node-ip)", node.Status.Addresses))
	}
	slices.Sort(problems)
	for _, p := range problems {
		st.t.Errorf("Node %s: %s", schedulerNode, p)
	}
	if len(problems) > 0 {
		st.t.FailNow()
	}
}

// checkReadyz checks kdm's /readyz?verbose the way an operator reads it: status 200, one
// "[+]name ok" line per check, and the closing line.
func (st *schedulerStory) checkReadyz() {
	st.t.Helper()
	var body string
	st.waitFor("/readyz?verbose passing", func() (bool, string) {
		resp, err := http.Get("http://" + st.healthAddr + "/readyz?verbose")
		if err != nil {
			return false, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("status %d: %s", resp.StatusCode, body)
	})
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if len(lines) < 2 || lines[len(lines)-1] != "readyz check passed" {
		st.t.Fatalf("/readyz?verbose: %q; want [+] lines and \"readyz check passed\"", body)
	}
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, "[+]") || !strings.HasSuffix(l, " ok") {
			st.t.Errorf("/readyz?verbose line %q; want \"[+]<check> ok\"", l)
		}
	}
}

// checkJSONLogs checks that kdm, started with --logging-format=json, writes one JSON object
// per line with the component-base fields.
func (st *schedulerStory) checkJSONLogs(kdm *process) {
	st.t.Helper()
	data, err := os.ReadFile(kdm.log)
	if err != nil {
		st.t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) < 3 {
		st.t.Fatalf("kdm wrote %d log lines; want several", len(lines))
	}
	for _, l := range lines {
		var entry struct {
			TS  *float64 `json:"ts"`
			V   *int     `json:"v"`
			Msg string   `json:"msg"`
		}
		if err := json.Unmarshal([]byte(l), &entry); err != nil || entry.TS == nil || entry.Msg == "" {
			st.t.Fatalf("kdm log line %q is not a component-base JSON entry (ts, msg): %v", l, err)
		}
	}
}

// restartKdmUndisturbed SIGKILLs kdm and starts it again, then checks through a pod watch
// that no pod was deleted, moved or changed phase, that every running pod keeps its GPUs,
// and that a pod created afterwards is scheduled and admitted. It returns the new process.
func (st *schedulerStory) restartKdmUndisturbed(kdm *process) *process {
	st.t.Helper()
	ctx := context.Background()
	pods := st.admin.CoreV1().Pods(st.ns)
	before, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		st.t.Fatal(err)
	}
	phase := map[string]v1.PodPhase{}
	node := map[string]string{}
	for _, p := range before.Items {
		phase[p.Name], node[p.Name] = p.Status.Phase, p.Spec.NodeName
	}
	gpusBefore := st.podResources()
	w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion})
	if err != nil {
		st.t.Fatal(err)
	}
	defer w.Stop()

	kdm.kill()
	killed := time.Now()
	kdm = st.startKdm()
	st.waitFor("the restarted kdm renews the node lease", func() (bool, string) {
		l, err := st.admin.CoordinationV1().Leases(nodestatus.LeaseNamespace).Get(ctx, schedulerNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(killed), fmt.Sprint(l.Spec.RenewTime)
	})
	st.waitGPUs(8, 8)
	if got := st.podResources(); !equalAssignments(got, gpusBefore) {
		st.t.Fatalf("podresources after the kdm restart: %v; before: %v", got, gpusBefore)
	}
	const probe = "after-restart"
	st.createPod(probe, cpuMemoryRequest("10m", "16Mi"))
	timeout := time.After(schedulerWait)
	for caughtUp := false; !caughtUp; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				st.t.Fatal("pod watch closed")
			}
			p, ok := ev.Object.(*v1.Pod)
			switch {
			case !ok:
			case p.Name == probe:
				caughtUp = runningReady(p)
			case ev.Type == watch.Deleted || p.Status.Phase != phase[p.Name] || p.Spec.NodeName != node[p.Name]:
				st.t.Fatalf("after the kdm restart: %s %s; before it: phase %q node %q", ev.Type, describe(p), phase[p.Name], node[p.Name])
			case p.Status.Phase == v1.PodRunning && !runningReady(p):
				st.t.Fatalf("after the kdm restart %s is no longer ready: %s", p.Name, describe(p))
			}
		case <-timeout:
			st.t.Fatalf("pod watch did not deliver %s running within %s", probe, schedulerWait)
		}
	}
	return kdm
}

// equalAssignments compares two podresources listings, each pod's GPUs as a set.
func equalAssignments(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for name, ids := range a {
		if !slices.Equal(sorted(ids), sorted(b[name])) {
			return false
		}
	}
	return true
}

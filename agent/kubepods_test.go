package agent

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// gpuPod is a pod bound to node whose init container and app container each ask for GPUs.
func gpuPod(ns, name, node string, initGPUs, appGPUs int) *v1.Pod {
	c := func(cname string, n int) v1.Container {
		return v1.Container{Name: cname, Image: "x", Resources: v1.ResourceRequirements{
			Limits: quantities("example.com/gpu", n)}}
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

func running(p *v1.Pod, err error) bool { return err == nil && p.Status.Phase == v1.PodRunning }

// TestAPIServerPodSource runs the agent in process against the real API server: init
// containers' devices are reused by the app container, a pod that completes releases its
// devices, and a pod deleted and recreated under the same name is a new pod.
func TestAPIServerPodSource(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver and etcd; run by make test")
	}
	c := testCluster.Get(t)
	admin := adminClient(t, c)
	nodeClient, err := c.Client("system:node:api-pods")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "default"
	forgetNode(t, admin, "api-pods")
	f := newFixture(t)
	a, _ := f.runWith(Config{KubeClient: nodeClient, NodeName: "api-pods", NodeStatusUpdateFrequency: time.Second})
	f.plugin("g0", "g1", "g2", "g3")
	waitNode(t, admin, "api-pods", "4 GPUs", has("example.com/gpu", 4, 4))

	// Init container 2, app container 4: the app reuses the init container's 2 and takes 2 more.
	created, err := admin.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, "init", "api-pods", 2, 4), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPod(t, admin, ns, "init", "Running", running)
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
	f.waitFor(a, "the completed pod released", func(st NodeStatus) bool { return phase(st, "init") == nil })

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
	if r := phase(st, "again"); r == nil || r.UID != second.UID || r.Phase != PhaseAdmitted {
		t.Errorf("status of the recreated pod: %+v", r)
	}
}

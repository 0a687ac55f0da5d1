package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/devicemanager"
)

// TestAPIServerPendingPod: under the kdm policy a pod whose resource has no plugin yet waits,
// and its Pod status on the real API server says so (Pending, PodReadyToStartContainers False
// with the reason, the resource and the deadline); once the plugin registers the pod runs and
// the condition turns True.
func TestAPIServerPendingPod(t *testing.T) {
	admin, nodeClient := apiServerNode(t, "api-pending")
	ctx := context.Background()
	const ns = "default"
	f := newFixture(t)
	a, _ := f.runWith(Config{KubeClient: nodeClient, NodeName: "api-pending", NodeStatusUpdateFrequency: time.Second,
		Policy: devicemanager.KDMPolicy()})
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, "early", "api-pending", 0, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Pods(ns).Delete(context.Background(), "early", metav1.DeleteOptions{}) })
	waitingCondition := func(p *v1.Pod) *v1.PodCondition {
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == v1.PodReadyToStartContainers {
				return &p.Status.Conditions[i]
			}
		}
		return nil
	}
	waitPod(t, admin, ns, "early", "Pending with the waiting condition", func(p *v1.Pod, err error) bool {
		if err != nil || p.Status.Phase != v1.PodPending {
			return false
		}
		c := waitingCondition(p)
		return c != nil && c.Status == v1.ConditionFalse && c.Reason == ReasonWaitingForDevicePlugin &&
			strings.Contains(c.Message, "example.com/gpu") && strings.Contains(c.Message, "until")
	})
	if r := phase(a.Status(), "early"); r == nil || r.Phase != podresult.PhasePending {
		t.Fatalf("/status of the waiting pod: %+v, want Pending", r)
	}
	f.plugin("g0", "g1")
	waitPod(t, admin, ns, "early", "Running once the plugin registered", func(p *v1.Pod, err error) bool {
		if !running(p, err) {
			return false
		}
		c := waitingCondition(p)
		return c != nil && c.Status == v1.ConditionTrue
	})
}

package apipods

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/agent/internal/apitest"
	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/checkpoint"
)

// fakePods is an owner that admits every pod at once: "big" is rejected, any other pod gets
// GPU g0. Pods in stopping keep their containers until the test lets them go.
type fakePods struct {
	src *Source

	mu        sync.Mutex
	tracked   map[types.UID]*v1.Pod
	results   map[types.UID]*podresult.PodResult
	stopping  map[types.UID]bool
	untracked []types.UID
	syncs     map[string]int // TrackedByName calls per pod name: each sync of a key makes one
}

func newFakePods() *fakePods {
	return &fakePods{tracked: map[types.UID]*v1.Pod{}, results: map[types.UID]*podresult.PodResult{},
		stopping: map[types.UID]bool{}, syncs: map[string]int{}}
}

func (f *fakePods) Track(_ context.Context, pod *v1.Pod) (<-chan struct{}, bool) {
	f.mu.Lock()
	if _, ok := f.tracked[pod.UID]; ok {
		f.mu.Unlock()
		return nil, false
	}
	f.tracked[pod.UID] = pod
	r := &podresult.PodResult{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Phase: podresult.PhaseAdmitted,
		Containers: []podresult.ContainerResult{{Name: "main", Allocations: []podresult.Allocation{
			{Resource: "example.com/gpu", DeviceIDs: checkpoint.DevicesPerNUMA{0: {"g0"}}}}}}}
	if pod.Name == "big" {
		r = &podresult.PodResult{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Phase: podresult.PhaseRejected,
			Reason: "UnexpectedAdmissionError", Message: "not enough GPUs"}
	}
	f.results[pod.UID] = r
	f.mu.Unlock()
	f.src.Enqueue(pod)
	done := make(chan struct{})
	close(done)
	return done, true
}

func (f *fakePods) Untrack(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.tracked, uid)
	delete(f.results, uid)
	f.untracked = append(f.untracked, uid)
}

func (f *fakePods) TrackedByName(namespace, name string) []types.UID {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncs[name]++
	var out []types.UID
	for uid, p := range f.tracked {
		if p.Namespace == namespace && p.Name == name {
			out = append(out, uid)
		}
	}
	return out
}

func (f *fakePods) Tracked(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.tracked[uid]
	return ok
}

func (f *fakePods) Result(uid types.UID) *podresult.PodResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.results[uid]
}

func (f *fakePods) Stopping(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopping[uid]
}

func (f *fakePods) AdmittedBefore(types.UID) bool { return false }

func (f *fakePods) wasUntracked(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, u := range f.untracked {
		if u == uid {
			return true
		}
	}
	return false
}

func (f *fakePods) setStopping(uid types.UID, stopping bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopping[uid] = stopping
}

// synced waits until the source has synced pod once more after the call: with one worker and
// a FIFO queue, every key enqueued before it has been synced too.
func (f *fakePods) synced(t *testing.T, pod *v1.Pod) {
	t.Helper()
	f.mu.Lock()
	n := f.syncs[pod.Name]
	f.mu.Unlock()
	f.src.Enqueue(pod)
	apitest.Eventually(t, "a sync of pod "+pod.Name, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.syncs[pod.Name] > n
	})
}

func gpuPod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{NodeName: "edge-1", Containers: []v1.Container{{Name: "main", Image: "x",
			Resources: v1.ResourceRequirements{Limits: apitest.Quantities("example.com/gpu", 1)}}}}}
}

// TestSourceAdmitsPublishesAndDeletes runs a Source against the fake API server with a fake
// owner: the node's pods are handed to Track and the source reports ready; an admitted pod's
// status is patched Running with a Normal event naming its devices, a rejected one Failed with
// a Warning event; a pod being deleted is untracked and deleted with grace period 0, but only
// once its containers are gone.
func TestSourceAdmitsPublishesAndDeletes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "default"
	deleting := gpuPod("deleting")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)}
	api := apitest.NewFakeAPI(gpuPod("ok"), deleting)
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	pods := newFakePods()
	pods.stopping[deleting.UID] = true
	pods.src = New(Config{Client: api, NodeName: "edge-1", Clock: clk, Logger: ktesting.NewLogger(t, ktesting.NewConfig())}, pods)

	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- pods.src.Run(ctx, func() { close(ready) }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run returned before the source was ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the source never reported ready")
	}
	if pods.Tracked(deleting.UID) {
		t.Errorf("the pod being deleted was tracked")
	}

	get := func(name string) (*v1.Pod, error) { return api.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}) }
	event := func(name, reason string) *v1.Event {
		list, err := api.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			if e := &list.Items[i]; e.InvolvedObject.Name == name && e.Reason == reason {
				return e
			}
		}
		return nil
	}
	apitest.Eventually(t, "pod ok Running", func() bool { p, err := get("ok"); return err == nil && p.Status.Phase == v1.PodRunning })
	apitest.Eventually(t, "the DevicesAssigned event", func() bool { return event("ok", ReasonDevicesAssigned) != nil })
	if e := event("ok", ReasonDevicesAssigned); e.Type != v1.EventTypeNormal || e.Message != "Assigned devices: container main: example.com/gpu g0" ||
		e.Source.Component != "kdm" || e.Source.Host != "edge-1" {
		t.Errorf("event %s %q from %+v", e.Type, e.Message, e.Source)
	}
	if p, _ := get("ok"); p.Status.StartTime == nil || !p.Status.StartTime.Time.Equal(clk.Now()) {
		t.Errorf("start time %v, want the clock's %v", p.Status.StartTime, clk.Now())
	}

	if _, err := api.CoreV1().Pods(ns).Create(ctx, gpuPod("big"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apitest.Eventually(t, "pod big Failed", func() bool { p, err := get("big"); return err == nil && p.Status.Phase == v1.PodFailed })
	if p, _ := get("big"); p.Status.Reason != "UnexpectedAdmissionError" || p.Status.Message != "Pod was rejected: not enough GPUs" {
		t.Errorf("rejected pod status %q %q", p.Status.Reason, p.Status.Message)
	}
	apitest.Eventually(t, "the rejection's Warning event", func() bool {
		e := event("big", "UnexpectedAdmissionError")
		return e != nil && e.Type == v1.EventTypeWarning
	})

	// ok is deleted: it is untracked at once, but its containers still stop; once they are
	// gone the owner enqueues it and the source deletes it.
	okPod, _ := get("ok")
	okPod.DeletionTimestamp = &metav1.Time{Time: clk.Now()}
	pods.setStopping(okPod.UID, true)
	if _, err := api.CoreV1().Pods(ns).Update(ctx, okPod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	apitest.Eventually(t, "ok untracked", func() bool { return pods.wasUntracked(okPod.UID) })
	pods.synced(t, gpuPod("big"))
	for _, name := range []string{"ok", "deleting"} {
		if _, err := get(name); err != nil {
			t.Errorf("pod %s whose containers still stop: %v, want it kept", name, err)
		}
	}
	if n := api.Count("delete pods"); n != 0 {
		t.Errorf("%d pod deletes while containers still stop, want none", n)
	}
	for _, p := range []*v1.Pod{okPod, deleting} {
		pods.setStopping(p.UID, false)
		pods.src.Enqueue(p)
		apitest.Eventually(t, p.Name+" deleted", func() bool { _, err := get(p.Name); return apierrors.IsNotFound(err) })
	}
	if err := pods.src.Healthy(); err != nil {
		t.Errorf("Healthy: %v", err)
	}
}

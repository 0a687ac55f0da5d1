package agent

import (
	"context"
	"fmt"
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kdm-project/kdm/agent/podresult"
)

// kubePodSource admits the pods the API server binds to the node and reports their outcome in
// pod status, the kubelet's way: a rejected pod becomes Failed with the admission reason, a pod
// being deleted releases its devices and is then deleted with grace period 0.
//
// An informer restricted to spec.nodeName feeds a work queue of pod keys; one worker reconciles
// each key against the agent's pods. Admissions run in their own goroutines and requeue the
// pod when their result is recorded, so its status is published by the same worker.
type kubePodSource struct {
	a      *Agent
	client kubernetes.Interface
	node   string
	log    klog.Logger
	queue  workqueue.TypedRateLimitingInterface[string]
	lister corelisters.PodLister
	// recorder sends the pods' events; set by run, which owns its broadcaster.
	recorder record.EventRecorder

	mu      sync.Mutex
	lastErr error // of the last pod sync; nil once one succeeds
}

func newKubePodSource(a *Agent) *kubePodSource {
	return &kubePodSource{
		a:      a,
		client: a.cfg.KubeClient,
		node:   a.cfg.NodeName,
		log:    a.log.WithName("pods"),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kdm_pods"}),
	}
}

// enqueue schedules a reconcile of the pod's key.
func (s *kubePodSource) enqueue(pod *v1.Pod) {
	s.queue.Add(cache.ObjectName{Namespace: pod.Namespace, Name: pod.Name}.String())
}

// run watches the node's pods until ctx ends. The pods of the first listing are handed to
// admission and waited for before the source reports ready through sourceReady.
func (s *kubePodSource) run(ctx context.Context, sourceReady func()) error {
	defer s.queue.ShutDown()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.client.CoreV1().Events("")})
	s.recorder = broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: eventComponent, Host: s.node})
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", s.node).String()
		}))
	defer factory.Shutdown()
	podInformer := factory.Core().V1().Pods()
	s.lister = podInformer.Lister()
	enqueueObj := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			s.queue.Add(key)
		}
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueObj,
		UpdateFunc: func(_, obj any) { enqueueObj(obj) },
		DeleteFunc: enqueueObj,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	s.log.Info("Watching pods bound to the node", "node", klog.KRef("", s.node))
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.Informer().HasSynced) {
		return nil
	}
	pods, err := s.lister.List(labels.Everything())
	if err != nil {
		return err
	}
	sort.Slice(pods, func(i, j int) bool {
		if !pods[i].CreationTimestamp.Equal(&pods[j].CreationTimestamp) {
			return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp)
		}
		return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name
	})
	// Pods admitted by an earlier run go first; the source is ready once their admissions
	// are over or wait for a device plugin (see manifests.Watch).
	var restarted []<-chan struct{}
	for _, pod := range s.a.runningFirst(pods) {
		if !isActive(pod) {
			continue
		}
		before := s.a.admittedBefore(pod.UID)
		if settled, ok := s.a.track(ctx, sourceAPI, pod); ok && before {
			restarted = append(restarted, settled)
		}
	}
	for _, settled := range restarted {
		select {
		case <-settled:
		case <-ctx.Done():
			return nil
		}
	}
	sourceReady()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for s.processNext(ctx) {
		}
	}()
	<-ctx.Done()
	s.queue.ShutDown()
	wg.Wait()
	return nil
}

func (s *kubePodSource) processNext(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	err := s.syncPod(ctx, key)
	if ctx.Err() == nil {
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error(err, "Failed to sync pod, will retry", "pod", key)
			s.queue.AddRateLimited(key)
		}
		return true
	}
	s.queue.Forget(key)
	return true
}

// eventComponent is the source component of kdm's events.
const eventComponent = "kdm"

// healthy returns the error of the last pod sync, nil if it succeeded.
func (s *kubePodSource) healthy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastErr != nil {
		return fmt.Errorf("last pod sync failed: %w", s.lastErr)
	}
	return nil
}

// syncPod reconciles one pod key: a pod that is gone, terminal or being deleted releases its
// devices; a new active pod is admitted; an admitted or rejected pod gets its status published.
func (s *kubePodSource) syncPod(ctx context.Context, key string) error {
	ref, err := cache.ParseObjectName(key)
	if err != nil {
		return nil
	}
	pod, err := s.lister.Pods(ref.Namespace).Get(ref.Name)
	if apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return err
	}
	for _, uid := range s.a.trackedByName(ref.Namespace, ref.Name) {
		if pod == nil || pod.UID != uid || !isActive(pod) {
			s.a.untrack(uid)
		}
	}
	switch {
	case pod == nil:
		return nil
	case pod.DeletionTimestamp != nil:
		if s.a.containers != nil && s.a.containers.isStopping(pod.UID) {
			return nil // its containers still run: deleted once they are gone (containerRoom.onStopped)
		}
		return s.finishDeletion(ctx, pod)
	case !isActive(pod):
		return nil
	}
	if _, ok := s.a.podByUID(pod.UID); !ok {
		s.a.track(ctx, sourceAPI, pod)
		return nil
	}
	r := s.a.result(pod.UID)
	if r == nil {
		return nil
	}
	return s.publish(ctx, pod, r)
}

// finishDeletion deletes a pod the API server marked for deletion, with grace period 0, once
// its devices are released (with a container runtime: once its containers are gone): without a
// kubelet nothing else would, and the pod would stay Terminating.
func (s *kubePodSource) finishDeletion(ctx context.Context, pod *v1.Pod) error {
	err := s.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err == nil {
		s.log.V(2).Info("Pod deleted after its devices were released", "pod", klog.KObj(pod), "podUID", pod.UID)
	}
	return err
}

// isActive reports whether a pod from the API server still needs its devices: not terminal
// and not being deleted.
func isActive(pod *v1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed
}

// trackedByName lists the UIDs of the API server's tracked pods with this namespace and name (a pod recreated
// under the same name has a new UID).
func (a *Agent) trackedByName(namespace, name string) []types.UID {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []types.UID
	for uid, p := range a.pods {
		if a.podSource[uid] == sourceAPI && p.Namespace == namespace && p.Name == name {
			out = append(out, uid)
		}
	}
	return out
}

// result returns the pod's admission result, or nil while none is recorded.
func (a *Agent) result(uid types.UID) *podresult.PodResult {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.results[uid]
}

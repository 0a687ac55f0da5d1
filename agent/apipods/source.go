package apipods

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
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/kdm-project/kdm/agent/podresult"
)

// Pods is the agent as the source sees it: it tracks and admits pods, and records their
// results. Every method may be called from the source's goroutines and must not block on the
// source.
type Pods interface {
	// Track adds a pod of the API server and starts its admission. It returns a channel closed
	// once that admission is over or waits for a device plugin, and false when no admission
	// started (the pod is tracked already, say).
	Track(ctx context.Context, pod *v1.Pod) (settled <-chan struct{}, started bool)
	// Untrack removes a pod that is gone, terminal, replaced or being deleted, and releases its
	// devices (with a container runtime, once its containers are gone).
	Untrack(uid types.UID)
	// TrackedByName lists the UIDs of this source's tracked pods with this namespace and name
	// (a pod recreated under the same name has a new UID).
	TrackedByName(namespace, name string) []types.UID
	// Tracked reports whether a pod with this UID is tracked, from any source.
	Tracked(uid types.UID) bool
	// Result returns the pod's admission result, or nil while none is recorded.
	Result(uid types.UID) *podresult.PodResult
	// Stopping reports whether the removed pod's containers or sandbox may still exist: a pod
	// being deleted is deleted only once they are gone, and the owner calls Enqueue then.
	Stopping(uid types.UID) bool
	// AdmittedBefore reports whether the pod was admitted by an earlier run: such pods go
	// first, and the source reports ready once they are admitted again.
	AdmittedBefore(uid types.UID) bool
}

// Config is what a Source watches the API server with.
type Config struct {
	// Client talks to the API server with the node's identity.
	Client kubernetes.Interface
	// NodeName is the node whose pods are watched; it is also the host of the events.
	NodeName string
	// Clock gives the times written in pod status; nil means the real clock.
	Clock clock.Clock
	// Logger receives the source's problems and changes; the zero value means
	// klog.Background().
	Logger klog.Logger
}

// Source admits the pods the API server binds to the node and reports their outcome in pod
// status, the kubelet's way: a rejected pod becomes Failed with the admission reason, a pod
// being deleted releases its devices and is then deleted with grace period 0.
//
// An informer restricted to spec.nodeName feeds a work queue of pod keys; one worker reconciles
// each key against Pods. Admissions run in the owner's goroutines, which call Enqueue when a
// result is recorded, so its status is published by the same worker.
type Source struct {
	pods   Pods
	client kubernetes.Interface
	node   string
	clock  clock.Clock
	log    klog.Logger
	queue  workqueue.TypedRateLimitingInterface[string]
	lister corelisters.PodLister
	// recorder sends the pods' events; set by Run, which owns its broadcaster.
	recorder record.EventRecorder

	mu      sync.Mutex
	lastErr error // of the last pod sync; nil once one succeeds
}

// New returns a Source for cfg's node that admits its pods through pods; Run starts it.
func New(cfg Config, pods Pods) *Source {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = klog.Background()
	}
	return &Source{
		pods:   pods,
		client: cfg.Client,
		node:   cfg.NodeName,
		clock:  cfg.Clock,
		log:    cfg.Logger.WithName("pods"),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kdm_pods"}),
	}
}

// Enqueue schedules a reconcile of the pod: its result was recorded, or its containers are gone.
func (s *Source) Enqueue(pod *v1.Pod) {
	s.queue.Add(cache.ObjectName{Namespace: pod.Namespace, Name: pod.Name}.String())
}

// Run watches the node's pods until ctx ends, then returns nil once its worker has stopped.
// The pods of the first listing are handed to Pods.Track, those admitted by an earlier run
// first, and the admissions of those are waited for before Run calls sourceReady. Run is
// called at most once.
func (s *Source) Run(ctx context.Context, sourceReady func()) error {
	defer s.queue.ShutDown()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.client.CoreV1().Events("")})
	s.recorder = broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: eventComponent, Host: s.node})
	// One pod informer, not a SharedInformerFactory: the factory's ForResource names every API
	// group's informer, which keeps them all, and their listers, in the binary (about 2 MB).
	informer := coreinformers.NewFilteredPodInformer(s.client, metav1.NamespaceAll, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", s.node).String()
		})
	s.lister = corelisters.NewPodLister(informer.GetIndexer())
	ictx, stopInformer := context.WithCancel(ctx)
	informerDone := make(chan struct{})
	defer func() {
		stopInformer()
		<-informerDone
	}()
	enqueueObj := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			s.queue.Add(key)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueObj,
		UpdateFunc: func(_, obj any) { enqueueObj(obj) },
		DeleteFunc: enqueueObj,
	}); err != nil {
		close(informerDone)
		return err
	}
	go func() {
		defer close(informerDone)
		informer.RunWithContext(ictx)
	}()
	s.log.Info("Watching pods bound to the node", "node", klog.KRef("", s.node))
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
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
	for _, pod := range s.runningFirst(pods) {
		if !isActive(pod) {
			continue
		}
		before := s.pods.AdmittedBefore(pod.UID)
		if settled, ok := s.pods.Track(ctx, pod); ok && before {
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

func (s *Source) processNext(ctx context.Context) bool {
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

// Healthy returns the error of the last pod sync, nil if it succeeded.
func (s *Source) Healthy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastErr != nil {
		return fmt.Errorf("last pod sync failed: %w", s.lastErr)
	}
	return nil
}

// syncPod reconciles one pod key: a pod that is gone, terminal or being deleted releases its
// devices; a new active pod is admitted; an admitted, waiting or rejected pod gets its status
// published.
func (s *Source) syncPod(ctx context.Context, key string) error {
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
	for _, uid := range s.pods.TrackedByName(ref.Namespace, ref.Name) {
		if pod == nil || pod.UID != uid || !isActive(pod) {
			s.pods.Untrack(uid)
		}
	}
	switch {
	case pod == nil:
		return nil
	case pod.DeletionTimestamp != nil:
		if s.pods.Stopping(pod.UID) {
			return nil // its containers still run: the owner enqueues it once they are gone
		}
		return s.finishDeletion(ctx, pod)
	case !isActive(pod):
		return nil
	}
	if !s.pods.Tracked(pod.UID) {
		s.pods.Track(ctx, pod)
		return nil
	}
	r := s.pods.Result(pod.UID)
	if r == nil {
		return nil
	}
	return s.publish(ctx, pod, r)
}

// finishDeletion deletes a pod the API server marked for deletion, with grace period 0, once
// its devices are released (with a container runtime: once its containers are gone): without a
// kubelet nothing else would, and the pod would stay Terminating.
func (s *Source) finishDeletion(ctx context.Context, pod *v1.Pod) error {
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

// runningFirst orders the pods admitted by an earlier run before the others, keeping the
// order within each group. Their admissions re-attach checkpointed devices without asking the
// plugins; the source counts as ready once those are settled.
func (s *Source) runningFirst(pods []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, 0, len(pods))
	var rest []*v1.Pod
	for _, p := range pods {
		if s.pods.AdmittedBefore(p.UID) {
			out = append(out, p)
		} else {
			rest = append(rest, p)
		}
	}
	return append(out, rest...)
}

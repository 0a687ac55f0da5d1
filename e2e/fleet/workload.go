package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Namespace holds the workload.
const Namespace = "fleet"

// groupSize is how many pods one Deployment or Job has.
const groupSize = 10

// evictAfter is how long the workload's pods stay on a node that is not ready or unreachable
// before the taint-eviction controller evicts them (the apiserver would give them 300 s).
const evictAfter = 5

// CreateWorkload creates Deployments and Jobs (alternately, of groupSize pods each, the last
// one smaller) totalling pods single-GPU pods in Namespace, and starts the pod watch that
// Running and Pods read. The scheduler places them; kdm admits them.
func (f *Fleet) CreateWorkload(ctx context.Context, pods int) error {
	if _, err := f.Admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}
	if err := f.watchPods(ctx); err != nil {
		return err
	}
	f.wantPods = pods
	for g := 0; pods > 0; g++ {
		size := min(pods, groupSize)
		pods -= size
		name := fmt.Sprintf("gpu-%03d", g)
		labels := map[string]string{"app": name}
		tmpl := v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec()}
		var err error
		if g%2 == 0 {
			_, err = f.Admin.AppsV1().Deployments(Namespace).Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(size)),
					Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
			}, metav1.CreateOptions{})
		} else {
			tmpl.Spec.RestartPolicy = v1.RestartPolicyNever
			_, err = f.Admin.BatchV1().Jobs(Namespace).Create(ctx, &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: batchv1.JobSpec{Parallelism: ptr.To(int32(size)), Completions: ptr.To(int32(size)),
					BackoffLimit: ptr.To(int32(1000)), Template: tmpl},
			}, metav1.CreateOptions{})
		}
		if err != nil {
			return fmt.Errorf("creating %s: %w", name, err)
		}
	}
	return nil
}

// podSpec is one container asking one GPU, evicted evictAfter seconds after its node fails.
func podSpec() v1.PodSpec {
	var tolerations []v1.Toleration
	for _, taint := range []string{v1.TaintNodeNotReady, v1.TaintNodeUnreachable} {
		tolerations = append(tolerations, v1.Toleration{Key: taint, Operator: v1.TolerationOpExists,
			Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](evictAfter)})
	}
	return v1.PodSpec{
		Containers: []v1.Container{{Name: "main", Image: "example.com/cuda",
			Resources: v1.ResourceRequirements{Limits: v1.ResourceList{GPUResource: *resource.NewQuantity(1, resource.DecimalSI)}}}},
		TerminationGracePeriodSeconds: ptr.To[int64](5),
		Tolerations:                   tolerations,
	}
}

// watchPods starts an informer on the workload's pods; Stop ends it.
func (f *Fleet) watchPods(ctx context.Context) error {
	ictx, cancel := context.WithCancel(ctx)
	f.stopWatch = cancel
	factory := informers.NewSharedInformerFactoryWithOptions(f.Admin, 0, informers.WithNamespace(Namespace))
	inf := factory.Core().V1().Pods()
	f.podLister = inf.Lister()
	informer := inf.Informer()
	factory.Start(ictx.Done())
	if !cache.WaitForCacheSync(ictx.Done(), informer.HasSynced) {
		return fmt.Errorf("pod informer did not sync")
	}
	f.factory = factory
	return nil
}

// Pods lists the workload's pods, as the watch last saw them.
func (f *Fleet) Pods() []*v1.Pod {
	pods, _ := f.podLister.List(everything)
	return pods
}

// Running counts the workload's pods that are Running and not being deleted.
func (f *Fleet) Running() int {
	n := 0
	for _, p := range f.Pods() {
		if p.Status.Phase == v1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// WaitAllRunning waits until every pod of the workload is Running and, with settled, none is
// left being deleted or Pending; it returns how long that took from since.
func (f *Fleet) WaitAllRunning(ctx context.Context, since time.Time, timeout time.Duration, settled bool) (time.Duration, error) {
	err := f.poll(ctx, fmt.Sprintf("%d pods Running", f.wantPods), timeout, func() (bool, string, error) {
		pods := f.Pods()
		running, other := 0, ""
		for _, p := range pods {
			if p.Status.Phase == v1.PodRunning && p.DeletionTimestamp == nil {
				running++
			} else {
				other = describe(p)
			}
		}
		return running == f.wantPods && (!settled || len(pods) == f.wantPods), fmt.Sprintf("%d of %d pods Running, %d listed; e.g. %s", running, f.wantPods, len(pods), other), nil
	})
	return time.Since(since), err
}

func describe(p *v1.Pod) string {
	s := fmt.Sprintf("%s on %q %s", p.Name, p.Spec.NodeName, p.Status.Phase)
	if p.DeletionTimestamp != nil {
		s += " (being deleted)"
	}
	if p.Status.Reason != "" {
		s += " " + p.Status.Reason + ": " + p.Status.Message
	}
	return s
}

// workloadState describes the Deployments and Jobs that do not have all their pods, for a
// failure message.
func (f *Fleet) workloadState(ctx context.Context) string {
	var parts []string
	if ds, err := f.Admin.AppsV1().Deployments(Namespace).List(ctx, metav1.ListOptions{}); err == nil {
		for _, d := range ds.Items {
			if d.Status.AvailableReplicas != *d.Spec.Replicas {
				parts = append(parts, fmt.Sprintf("Deployment %s: %d of %d available", d.Name, d.Status.AvailableReplicas, *d.Spec.Replicas))
			}
		}
	}
	if js, err := f.Admin.BatchV1().Jobs(Namespace).List(ctx, metav1.ListOptions{}); err == nil {
		for _, j := range js.Items {
			if j.Status.Active != *j.Spec.Parallelism {
				parts = append(parts, fmt.Sprintf("Job %s: active %d succeeded %d failed %d terminating %d conditions %v",
					j.Name, j.Status.Active, j.Status.Succeeded, j.Status.Failed, ptr.Deref(j.Status.Terminating, 0), j.Status.Conditions))
			}
		}
	}
	return strings.Join(parts, "; ")
}

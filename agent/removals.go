package agent

import (
	"context"
	"errors"
	"os"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/agent/podresult"
)

// Removals. A pod that its source removed gives its devices back through one worker
// (runRemovals) that takes, each time it runs, every removal queued since it last ran: one
// garbage collection and one checkpoint write release the devices of all of them, then their
// result files go. So a removal never waits behind other pods' removals (a checkpoint write
// each, once), nor behind admissions: the worker takes no lock an admission holds across its
// plugin calls, and the only lock it shares with them (recordMu, for the result files) is held
// for one file write at a time. With a container runtime a removed pod is first marked
// Terminating in its result (by the same worker, so that the source that removed it goes on at
// once), and its removal is queued once the runtime has stopped its containers.
type removals struct {
	mu sync.Mutex
	// release are the pods whose devices and result are to go.
	release map[types.UID]*v1.Pod
	// terminating are the removed pods whose result is to say Terminating.
	terminating map[types.UID]termination
	wake        chan struct{}
}

func newRemovals() *removals {
	return &removals{release: map[types.UID]*v1.Pod{}, terminating: map[types.UID]termination{}, wake: make(chan struct{}, 1)}
}

// termination is a removed pod to mark Terminating, with its grace period (nil: unknown).
type termination struct {
	pod   *v1.Pod
	grace *int64
}

func (r *removals) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// queueRelease has the worker release the removed pod's devices and forget its result. It
// never blocks.
func (a *Agent) queueRelease(pod *v1.Pod) {
	a.removals.mu.Lock()
	a.removals.release[pod.UID] = pod
	a.removals.mu.Unlock()
	a.removals.signal()
}

// queueTerminating has the worker mark the removed pod Terminating in its result, with its
// grace period when known. It never blocks.
func (a *Agent) queueTerminating(pod *v1.Pod, grace *int64) {
	a.removals.mu.Lock()
	a.removals.terminating[pod.UID] = termination{pod, grace}
	a.removals.mu.Unlock()
	a.removals.signal()
}

// releasePending reports whether the pod's release is queued and not done yet.
func (a *Agent) releasePending(uid types.UID) bool {
	a.removals.mu.Lock()
	defer a.removals.mu.Unlock()
	_, ok := a.removals.release[uid]
	return ok
}

// runRemovals is the removal worker; it returns when ctx ends. Removals still queued then are
// finished by the next start, which finds their results without their pods.
func (a *Agent) runRemovals(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.removals.wake:
		}
		a.processRemovals()
	}
}

// processRemovals releases, then marks, what is queued.
func (a *Agent) processRemovals() {
	a.removals.mu.Lock()
	release, terminating := a.removals.release, a.removals.terminating
	a.removals.release, a.removals.terminating = map[types.UID]*v1.Pod{}, map[types.UID]termination{}
	a.removals.mu.Unlock()
	if len(release) > 0 {
		a.releaseAll(release)
	}
	for _, t := range terminating {
		a.markTerminating(t.pod, t.grace)
	}
}

// releaseAll forgets removed pods: their devices return to the pool (one checkpoint write for
// all) and their result files go. A pod that its source listed again meanwhile (a manifest put
// back with its UID) is tracked and keeps its devices and result.
//
// The devices are released, and the checkpoint written, before the result files go: a crash
// in between leaves results for pods that no longer hold devices, which the next start drops,
// never a checkpoint entry that no result explains.
func (a *Agent) releaseAll(pods map[types.UID]*v1.Pod) {
	a.manager.UpdateAllocatedDevices() // the pods are in no source and no longer stopping
	for uid, pod := range pods {
		a.recordMu.Lock()
		a.mu.Lock()
		_, back := a.pods[uid]
		if !back {
			delete(a.results, uid)
		}
		a.mu.Unlock()
		if !back {
			if err := os.Remove(podresult.Path(a.cfg.PodsDir(), pod)); err != nil && !errors.Is(err, os.ErrNotExist) {
				a.log.Error(err, "Failed to remove pod result", "pod", klog.KObj(pod))
			}
		}
		a.recordMu.Unlock()
		if back {
			continue
		}
		a.log.Info("Pod removed; devices released", "pod", klog.KObj(pod), "podUID", uid)
		a.events.podRemoved(uid, pod.Namespace, pod.Name)
		if a.kube != nil {
			a.kube.enqueue(pod) // a pod being deleted is deleted now (apipods.Source)
		}
	}
}

// markTerminating records in a removed pod's result that its containers are being stopped,
// unless they are gone already or the result says so (a restart keeps the first mark).
func (a *Agent) markTerminating(pod *v1.Pod, grace *int64) {
	if a.containers == nil || !a.containers.isStopping(pod.UID) {
		return
	}
	a.updateResult(pod, func(r *podresult.PodResult) bool {
		if r.Terminating != nil {
			return false
		}
		r.Terminating = &podresult.Termination{Since: a.clock.Now().UTC().Truncate(0), GracePeriodSeconds: grace}
		return true
	})
}

// terminatingPods counts the removed pods whose containers are being stopped.
func (a *Agent) terminatingPods() int {
	if a.containers == nil {
		return 0
	}
	return len(a.containers.stoppingPods())
}

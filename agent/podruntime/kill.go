package podruntime

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Stopping removed pods. The kubelet stops each pod in a worker of its own; so does the Runtime:
// every pod that Pods no longer lists (or an orphan, or one StopPod named) is stopped and removed
// by a goroutine of its own, started by the sync that found it gone. Pods removed together stop
// together, each container with its pod's grace period, and a pod whose containers ignore
// SIGTERM holds up no other pod's stop, its OnStopped, or the sync of the listed pods.
//
// The goroutine calls OnStopped itself once nothing of the pod is left, so a pod's devices are
// released as soon as its own containers are gone. It then hands the pod back to Run's loop
// (killed), which forgets the pod's state at its next sync; until then the pod is in killing
// and is neither stopped again nor synced, also when its source lists it again.

// killOutcome is how one pod's stop ended; err is nil once nothing of the pod is left.
type killOutcome struct {
	uid types.UID
	err error
}

// startKill stops and removes the pod's containers and sandbox (rec, nil when the runtime holds
// nothing of it) in a goroutine of its own, unless one already does. pod is nil for an orphan.
// Called from Run's goroutine.
func (r *Runtime) startKill(ctx context.Context, rt runtimeClients, uid types.UID, pod *v1.Pod, rec *podRecord) {
	if r.killing[uid] {
		return
	}
	r.killing[uid] = true
	r.kills.Add(1)
	go func() {
		defer r.kills.Done()
		err := r.killPod(ctx, rt, uid, pod, rec)
		switch {
		case err == nil:
			if pod == nil && rec != nil {
				r.log.Info("Removed an orphaned pod's containers and sandbox", "podUID", uid)
			}
			// Nothing of the pod is left: its status goes before OnStopped, so a caller
			// released by OnStopped never reads a status of a pod that is gone.
			r.mu.Lock()
			delete(r.statuses, uid)
			r.mu.Unlock()
			if r.cfg.OnStopped != nil {
				r.cfg.OnStopped(uid)
			}
		case ctx.Err() == nil:
			r.log.Error(err, "Stopping a removed pod failed; retrying at the next sync", "podUID", uid, "pod", podRef(pod))
		}
		r.mu.Lock()
		r.killed = append(r.killed, killOutcome{uid: uid, err: err})
		r.mu.Unlock()
		r.Trigger()
	}()
}

// reapKills takes the outcomes of the stops that ended since the last sync: a stopped pod is
// forgotten, a failed stop is tried again by this sync (the runtime still lists the pod).
// Called from Run's goroutine.
func (r *Runtime) reapKills() {
	r.mu.Lock()
	done := r.killed
	r.killed = nil
	r.mu.Unlock()
	for _, k := range done {
		delete(r.killing, k.uid)
		if k.err != nil {
			continue
		}
		delete(r.known, k.uid)
		r.forget(k.uid)
		r.mu.Lock()
		delete(r.statuses, k.uid)
		r.mu.Unlock()
	}
}

package agent

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kdm-project/kdm/agent/podresult"
)

// watchHealth refreshes the device health recorded for pods the manager names on its update
// channel (a device they hold changed health).
func (a *Agent) watchHealth(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case u := <-a.manager.Updates():
			for _, uid := range u.PodUIDs {
				a.refreshHealth(types.UID(uid))
			}
		}
	}
}

func (a *Agent) refreshHealth(uid types.UID) {
	pod, ok := a.podByUID(uid)
	if !ok {
		return
	}
	a.mu.Lock()
	prev := a.results[uid]
	a.mu.Unlock()
	if prev == nil || prev.Phase != podresult.PhaseAdmitted {
		return
	}
	r := *prev
	r.Containers = append([]podresult.ContainerResult(nil), prev.Containers...)
	a.fillHealth(pod, &r)
	a.record(pod, &r)
}

// fillHealth sets each container's AllocatedResourcesStatus from the manager (KEP-4680), and
// the pod's Conflicts (fillConflicts).
func (a *Agent) fillHealth(pod *v1.Pod, r *podresult.PodResult) {
	status := &v1.PodStatus{}
	for _, c := range r.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, v1.ContainerStatus{Name: c.Name})
	}
	a.manager.UpdateAllocatedResourcesStatus(pod, status)
	for i := range r.Containers {
		r.Containers[i].AllocatedResourcesStatus = status.ContainerStatuses[i].AllocatedResourcesStatus
	}
	a.fillConflicts(pod, r)
}

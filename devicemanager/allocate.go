package devicemanager

import (
	"context"
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/internal/state"
)

// Allocate assigns devices to one container of a pod being admitted. Callers admit a pod's
// init containers first, in order, then its app containers, as the kubelet's topology manager
// does; an error is the reason to reject the pod (the kubelet reports it as
// "Allocate failed due to <err>, which is unexpected").
//
// Devices of regular init containers may be reused by the pod's later containers; sidecars
// (restartable init containers) and app containers take what they use out of that pool, so
// their sets are pairwise disjoint.
//
// Allocation is transactional: devices are reserved while the plugin is asked, and a failure
// at any step releases every reservation of the call and records nothing. A device reserved
// by an allocation in flight is never handed to another container, whatever runs concurrently.
func (m *Manager) Allocate(ctx context.Context, pod *v1.Pod, container *v1.Container) error {
	return m.allocateContainer(ctx, pod, container)
}

// allocateContainer runs the per-container steps in the order state.ContainerSteps gives them,
// the order the simulator (package explore) runs too: select devices per resource, call the
// plugin's Allocate, and commit everything, with the checkpoint write, or nothing. mu is held
// only while the steps read and change the state, never across an RPC, a wait or the write.
func (m *Manager) allocateContainer(ctx context.Context, pod *v1.Pod, c *v1.Container) error {
	demands := containerDemands(pod, c)
	m.mu.Lock()
	steps := m.st.NewContainerSteps(string(pod.UID), c.Name, isRegularInitContainer(pod, c.Name), demands)
	m.mu.Unlock()
	// Garbage collection runs once, before the first device-plugin resource is selected. What
	// it removed reaches the disk with this allocation's checkpoint write; every way out that
	// does not make that write, and every wait, writes it first (persistCollected), so a crash
	// cannot bring a removed pod's devices back for longer than one Allocate call.
	collected := false
	persistCollected := func() {
		if collected {
			collected = false
			m.persistRemovals()
		}
	}
	defer persistCollected()
	// waiter is this container's place in the order of admissions that waited for a device
	// plugin (sleepUntil), held until its allocation ends.
	var waiter *sleeper
	defer m.leaveWaitOrder(&waiter)
	for {
		m.mu.Lock()
		s := steps.Next(m.st)
		m.mu.Unlock()
		switch s.Kind {
		case state.StepDone:
			m.noteOutcome(ctx, string(pod.UID), s.Err)
			return s.Err // on a failed write, persistCollected tries again for the removals
		case state.StepPassOver:
		case state.StepAwaitUnknown:
			persistCollected() // the resource may be waited for
			steps.Served(m.awaitUnknownResource(ctx, pod, c.Name, s.Resource, &waiter))
		case state.StepCollect:
			collected = m.collectInactivePods()
		case state.StepSelect:
			steps.Selected(m.devicesToAllocateWithDeferral(ctx, pod, c.Name, s.Resource, s.Required, s.Reusable, &waiter, persistCollected))
		case state.StepAllocate:
			steps.Allocated(m.callAllocate(ctx, s.Pick))
		case state.StepWrite:
			err := m.writeCheckpoint()
			if err == nil {
				collected = false // written with the allocation
				m.log.V(3).Info("Allocated devices to container", "pod", klog.KObj(pod), "containerName", c.Name, "resources", len(steps.Picks()))
			}
			steps.Written(err)
		}
	}
}

// containerDemands lists the container's resources in name order, leaving out those a DRA
// claim serves.
func containerDemands(pod *v1.Pod, c *v1.Container) []state.Demand {
	demands := make([]state.Demand, 0, len(c.Resources.Limits))
	for _, res := range sortedLimitNames(c) {
		if isDRAMapped(pod, c.Name, res) {
			continue
		}
		qty := c.Resources.Limits[v1.ResourceName(res)]
		demands = append(demands, state.Demand{Resource: res, Required: int(qty.Value()),
			Awaitable: qty.Value() > 0 && isExtendedResourceName(res)})
	}
	return demands
}

// callAllocate asks the resource's plugin to allocate p.IDs and fills in the response and the
// per-NUMA record. No lock is held during the RPC.
func (m *Manager) callAllocate(ctx context.Context, p *state.Pick) error {
	m.mu.Lock()
	info, ok := m.endpoints[p.Resource]
	if !ok {
		m.mu.Unlock()
		return fmt.Errorf("unknown Device Plugin %s", p.Resource)
	}
	devs, missing, ok := m.st.DevicesPerNUMA(p.Resource, p.IDs)
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("device %s of resource %s is no longer reported by its plugin", missing, p.Resource)
	}

	start := m.cfg.Clock.Now()
	resp, err := info.ep.Allocate(ctx, sets.List(p.IDs))
	m.metrics.allocDuration.WithLabelValues(p.Resource).Observe(m.cfg.Clock.Since(start).Seconds())
	if err != nil {
		return err
	}
	if len(resp.ContainerResponses) == 0 {
		return fmt.Errorf("no containers return in allocation response %v", resp)
	}
	p.Devices, p.Response = devs, resp.ContainerResponses[0]
	return nil
}

// UpdateAllocatedDevices garbage-collects the devices of pods that are no longer active. It
// does nothing until every pod source is ready, so checkpointed assignments survive start-up.
// When it removed a pod it writes the checkpoint before returning: the kubelet leaves that to
// the next write, so a crash in between brings the removed pod's devices back, and a pod
// re-created under the same UID (a static pod) would be judged against them. Allocate, which
// collects too, folds that write into its own checkpoint write.
func (m *Manager) UpdateAllocatedDevices() {
	if m.collectInactivePods() {
		m.persistRemovals()
	}
}

// persistRemovals writes the checkpoint after garbage collection removed pods. A failure is
// logged: the removal stands in memory and reaches the disk with the next write.
func (m *Manager) persistRemovals() {
	if err := m.writeCheckpoint(); err != nil {
		m.log.Error(err, "Writing checkpoint encountered")
	}
}

// collectInactivePods drops the assignments and reuse pools of the pods that are not active,
// unless some pod source is not ready yet, and reports whether it dropped any assignment.
func (m *Manager) collectInactivePods() bool {
	m.mu.Lock()
	src := m.sources
	m.mu.Unlock()
	if src.SourcesReady != nil && !src.SourcesReady() {
		return false
	}
	var pods []*v1.Pod
	if src.ActivePods != nil {
		pods = src.ActivePods()
	}
	m.mu.Lock()
	pods = m.withoutRejectedLocked(pods)
	// Only the pods that left since the last collection, and those the state gained since,
	// are looked at (activePods, state.RemoveDeparted): on a node with many pods a
	// collection costs what changed.
	departed := m.active.update(pods)
	removed := m.st.RemoveDeparted(m.active.has, departed)
	m.notifySettledLocked()
	m.mu.Unlock()
	if len(removed) == 0 {
		return false
	}
	m.log.V(3).Info("Removed devices of pods that are no longer active", "podUIDs", removed)
	return true
}

// noteOutcome records whether the pod's admission failed: a pod whose Allocate returns an
// error is rejected by the caller (the contract of Allocate), so garbage collection treats it
// as gone before its source says so, as the kubelet's one-at-a-time admission has it gone
// before the next admission looks. An error of ctx (a shutdown, a pod deleted while it
// waited) says nothing of the pod; a later success clears the mark.
func (m *Manager) noteOutcome(ctx context.Context, podUID string, err error) {
	if err != nil && ctx.Err() != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		delete(m.rejected, podUID)
		return
	}
	if m.rejected == nil {
		m.rejected = map[string]struct{}{}
	}
	m.rejected[podUID] = struct{}{}
}

// withoutRejectedLocked returns the source's active pods less those whose admission failed,
// and forgets the failures of pods the source no longer lists. Callers hold mu.
func (m *Manager) withoutRejectedLocked(pods []*v1.Pod) []*v1.Pod {
	if len(m.rejected) == 0 {
		return pods
	}
	listed := make(map[string]bool, len(m.rejected))
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		if _, ok := m.rejected[string(p.UID)]; ok {
			listed[string(p.UID)] = true
			continue
		}
		out = append(out, p)
	}
	for uid := range m.rejected {
		if !listed[uid] {
			delete(m.rejected, uid)
		}
	}
	return out
}

func sortedLimitNames(c *v1.Container) []string {
	names := make([]string, 0, len(c.Resources.Limits))
	for n := range c.Resources.Limits {
		names = append(names, string(n))
	}
	sort.Strings(names)
	return names
}

// isRegularInitContainer reports whether name is an init container that is not a sidecar.
func isRegularInitContainer(pod *v1.Pod, name string) bool {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.Name == name {
			return !isRestartable(c)
		}
	}
	return false
}

func isRestartable(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// isDRAMapped reports whether the container's extended resource is served by a DRA claim
// (pod.Status.ExtendedResourceClaimStatus), in which case device plugins stay out of it.
func isDRAMapped(pod *v1.Pod, container, res string) bool {
	st := pod.Status.ExtendedResourceClaimStatus
	if st == nil {
		return false
	}
	for _, rm := range st.RequestMappings {
		if rm.ContainerName == container && rm.ResourceName == res {
			return true
		}
	}
	return false
}

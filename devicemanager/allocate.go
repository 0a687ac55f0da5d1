package devicemanager

import (
	"context"
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
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
	podUID := string(pod.UID)
	m.mu.Lock()
	reuse := m.st.ReusePool(podUID)
	m.mu.Unlock()

	if err := m.allocateContainer(ctx, pod, container, reuse); err != nil {
		return err
	}

	m.mu.Lock()
	m.st.ContainerAllocated(podUID, container.Name, isRegularInitContainer(pod, container.Name))
	m.mu.Unlock()
	return nil
}

// pick is what one resource of a container will receive.
type pick struct {
	resource string
	ids      sets.Set[string]
	devices  checkpoint.DevicesPerNUMA
	resp     *pluginapi.ContainerAllocateResponse
}

// allocateContainer runs the per-container algorithm: select devices per resource, call the
// plugin's Allocate, and commit everything, with the checkpoint write, or nothing.
func (m *Manager) allocateContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, reuse map[string]sets.Set[string]) error {
	podUID := string(pod.UID)
	var picks []*pick
	release := func() {
		m.mu.Lock()
		for _, p := range picks {
			m.st.Release(p.resource, p.ids)
		}
		m.mu.Unlock()
	}
	// Garbage collection runs once, before the first device-plugin resource is selected. What
	// it removed reaches the disk with this allocation's checkpoint write; every way out that
	// does not make that write, and every wait, writes it first (persistCollected), so a crash
	// cannot bring a removed pod's devices back for longer than one Allocate call.
	gcDone, collected := false, false
	persistCollected := func() {
		if collected {
			collected = false
			m.persistRemovals()
		}
	}
	defer persistCollected()
	for _, res := range sortedLimitNames(c) {
		qty := c.Resources.Limits[v1.ResourceName(res)]
		if isDRAMapped(pod, c.Name, res) {
			continue
		}
		m.mu.Lock()
		plugin := m.st.IsDevicePluginResource(res)
		m.mu.Unlock()
		if !plugin && qty.Value() > 0 && isExtendedResourceName(res) {
			persistCollected() // the resource may be waited for
			served, err := m.awaitUnknownResource(ctx, pod, c.Name, res)
			if err != nil {
				release()
				return err
			}
			plugin = served
		}
		if !plugin {
			continue
		}
		if !gcDone {
			collected = m.collectInactivePods()
			gcDone = true
		}
		ids, err := m.devicesToAllocateWithDeferral(ctx, pod, c.Name, res, int(qty.Value()), reuse[res], persistCollected)
		if err != nil {
			release()
			return err
		}
		if ids.Len() == 0 {
			continue
		}
		p := &pick{resource: res, ids: ids}
		picks = append(picks, p)
		if err := m.callAllocate(ctx, p); err != nil {
			release()
			return err
		}
	}
	if len(picks) == 0 {
		return nil
	}
	m.mu.Lock()
	committed := make([]string, 0, len(picks))
	for _, p := range picks {
		m.st.Commit(podUID, c.Name, p.resource, p.ids, p.devices, p.resp)
		committed = append(committed, p.resource)
	}
	m.mu.Unlock()
	if err := m.writeCheckpoint(); err != nil {
		m.mu.Lock()
		m.st.Uncommit(podUID, c.Name, committed)
		m.mu.Unlock()
		return err // persistCollected tries again for the removals
	}
	collected = false // written with the allocation
	m.log.V(3).Info("Allocated devices to container", "pod", klog.KObj(pod), "containerName", c.Name, "resources", len(picks))
	return nil
}

// callAllocate asks the resource's plugin to allocate p.ids and fills in the response and the
// per-NUMA record. No lock is held during the RPC.
func (m *Manager) callAllocate(ctx context.Context, p *pick) error {
	m.mu.Lock()
	info, ok := m.endpoints[p.resource]
	if !ok {
		m.mu.Unlock()
		return fmt.Errorf("unknown Device Plugin %s", p.resource)
	}
	devs, missing, ok := m.st.DevicesPerNUMA(p.resource, p.ids)
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("device %s of resource %s is no longer reported by its plugin", missing, p.resource)
	}

	start := m.cfg.Clock.Now()
	resp, err := info.ep.Allocate(ctx, sets.List(p.ids))
	m.metrics.allocDuration.WithLabelValues(p.resource).Observe(m.cfg.Clock.Since(start).Seconds())
	if err != nil {
		return err
	}
	if len(resp.ContainerResponses) == 0 {
		return fmt.Errorf("no containers return in allocation response %v", resp)
	}
	p.devices, p.resp = devs, resp.ContainerResponses[0]
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

// collectInactivePods drops the assignments of pods that are no longer active and reports
// whether it dropped any.
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
	active := make(sets.Set[string], len(pods))
	for _, p := range pods {
		active.Insert(string(p.UID))
	}
	m.mu.Lock()
	removed := m.st.RemoveInactive(active)
	m.notifySettledLocked()
	m.mu.Unlock()
	if len(removed) == 0 {
		return false
	}
	m.log.V(3).Info("Removed devices of pods that are no longer active", "podUIDs", removed)
	return true
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

package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/devicemanager/state"
)

// errNoHealthyDevices marks the failure that deferred admission may wait out.
var errNoHealthyDevices = state.ErrNoHealthyDevices

// devicesToAllocateWithDeferral is devicesToAllocate, except that with Policy.DeferAdmission a
// resource known from the checkpoint whose plugin has not registered again is waited for, up to
// the policy's timeout, instead of failing at once. beforeWait runs before the first wait.
func (m *Manager) devicesToAllocateWithDeferral(ctx context.Context, pod *v1.Pod, container, res string, required int, reusable sets.Set[string], beforeWait func()) (sets.Set[string], error) {
	ids, err := m.devicesToAllocate(ctx, pod, container, res, required, reusable)
	if err == nil || !m.cfg.Policy.DeferAdmission || !errors.Is(err, errNoHealthyDevices) {
		return ids, err
	}
	timer := m.cfg.Clock.NewTimer(m.cfg.Policy.DeferAdmissionTimeout)
	defer timer.Stop()
	notified, wasStopped := false, false
	m.log.Info("Deferring admission until the device plugin registers", "pod", klog.KObj(pod),
		"containerName", container, "resourceName", res, "timeout", m.cfg.Policy.DeferAdmissionTimeout)

	for {
		m.mu.Lock()
		changed := m.deviceChange
		now := m.cfg.Clock.Now()
		waiting := m.st.AwaitingPlugin(res, now, m.cfg.GracePeriod)
		graceLeft, stopped := m.st.GraceLeft(res, now, m.cfg.GracePeriod)
		m.mu.Unlock()
		wasStopped = wasStopped || stopped
		if !waiting {
			ids, err := m.devicesToAllocate(ctx, pod, container, res, required, reusable)
			if err != nil && wasStopped && m.gracePeriodOver(res) {
				return nil, fmt.Errorf("%w (the device plugin did not register again within the %v grace period; the resource is removed)", err, m.cfg.GracePeriod)
			}
			return ids, err
		}
		if !notified {
			beforeWait()
			if m.cfg.OnAdmissionDeferred != nil {
				m.cfg.OnAdmissionDeferred(string(pod.UID), container, res)
			}
		}
		notified = true
		// The grace period ending removes the resource without any device change: wake up for
		// it, so the pod is rejected at once rather than at the deferral timeout.
		var graceEnd <-chan time.Time
		stopGraceTimer := func() {}
		if stopped {
			t := m.cfg.Clock.NewTimer(graceLeft)
			graceEnd, stopGraceTimer = t.C(), func() { t.Stop() }
		}
		select {
		case <-changed:
		case <-graceEnd:
		case <-timer.C():
			stopGraceTimer()
			return nil, fmt.Errorf("%w (waited %v for the device plugin to register)", err, m.cfg.Policy.DeferAdmissionTimeout)
		case <-ctx.Done():
			stopGraceTimer()
			return nil, fmt.Errorf("%w (stopped waiting for the device plugin: %w)", err, ctx.Err())
		}
		stopGraceTimer()
	}
}

// gracePeriodOver reports whether the resource is gone: removed, or its plugin stopped
// for longer than the grace period.
func (m *Manager) gracePeriodOver(res string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.GraceOver(res, m.cfg.Clock.Now(), m.cfg.GracePeriod)
}

// awaitUnknownResource decides what happens to a container asking for a resource no plugin
// has registered (and no checkpoint names). The kubelet admits it without devices, relying on
// the scheduler. With Policy.DeferAdmission, a manager that started less than
// DeferAdmissionTimeout ago waits, until then, for a plugin to register the resource and send
// its first list, since after a restart or reboot plugins come back in any order; it reports
// true when the resource is served. Past the window, it admits as the kubelet does, with a
// warning that names the resource. A container that was running before the restart never
// waits: it keeps what it has (the restart bypass).
func (m *Manager) awaitUnknownResource(ctx context.Context, pod *v1.Pod, container, res string) (bool, error) {
	if !m.cfg.Policy.DeferAdmission {
		return false, nil
	}
	ready := m.sourcesReady()
	m.mu.Lock()
	deadline := m.startedAt.Add(m.cfg.Policy.DeferAdmissionTimeout)
	// A container that ran before the restart keeps what it has (the restart bypass); a
	// device chosen now could not be the one it uses.
	running := !ready && m.st.IsContainerAlreadyRunning(string(pod.UID), container)
	m.mu.Unlock()
	if running {
		return false, nil
	}
	warn := func() {
		m.log.Info("Warning: admitting a container without devices of a resource no device plugin has registered",
			"pod", klog.KObj(pod), "containerName", container, "resourceName", res)
	}
	left := deadline.Sub(m.cfg.Clock.Now())
	if left <= 0 {
		warn()
		return false, nil
	}
	timer := m.cfg.Clock.NewTimer(left)
	defer timer.Stop()
	notified := false
	for {
		m.mu.Lock()
		changed := m.deviceChange
		served := m.st.IsDevicePluginResource(res) && !m.st.AwaitingPlugin(res, m.cfg.Clock.Now(), m.cfg.GracePeriod)
		m.mu.Unlock()
		if served {
			return true, nil
		}
		if !notified {
			m.log.Info("Deferring admission until a device plugin registers the resource", "pod", klog.KObj(pod),
				"containerName", container, "resourceName", res, "timeout", left)
			if m.cfg.OnAdmissionDeferred != nil {
				m.cfg.OnAdmissionDeferred(string(pod.UID), container, res)
			}
			notified = true
		}
		select {
		case <-changed:
		case <-timer.C():
			warn()
			return false, nil
		case <-ctx.Done():
			return false, fmt.Errorf("stopped waiting for a device plugin to register %s: %w", res, ctx.Err())
		}
	}
}

// devicesToAllocate chooses and reserves the devices one container needs of one resource
// (state.Select: the kubelet's checks in the kubelet's order). It returns nil when nothing has
// to be allocated (the container keeps its cached devices, or it was already running at a
// restart). The chosen devices are reserved; the caller commits or releases them.
func (m *Manager) devicesToAllocate(ctx context.Context, pod *v1.Pod, container, res string, required int, reusable sets.Set[string]) (sets.Set[string], error) {
	// The embedder's callbacks run before mu is taken: they may call back into the manager.
	req := state.Request{PodUID: string(pod.UID), Container: container, Resource: res, Required: required,
		Reusable: reusable, SourcesReady: m.sourcesReady(), Hint: m.affinity(string(pod.UID), container)}
	m.mu.Lock()
	defer m.mu.Unlock()
	// The plugin's preference is asked without mu; Select re-checks what comes back. A plugin
	// that offers none is not asked (nil), which spares Select a copy of the free devices.
	var preferred state.PreferredFunc
	if info, ok := m.endpoints[res]; !ok || info.opts.GetGetPreferredAllocationAvailable() {
		preferred = func(available, mustInclude sets.Set[string], size int) (sets.Set[string], error) {
			m.mu.Unlock()
			defer m.mu.Lock()
			return m.preferredAllocation(ctx, res, available, mustInclude, size)
		}
	}
	ids, outcome, err := m.st.Select(req, preferred)
	if outcome == state.KeptRunning {
		m.log.V(3).Info("Container was running before the restart; keeping its devices", "pod", klog.KObj(pod), "containerName", container, "resourceName", res)
	}
	return ids, err
}

// preferredAllocation asks the plugin which devices it prefers, when it offers the call. With
// Policy.PreferredAllocationFallback an RPC failure yields no preference instead of an error.
// Called without mu.
func (m *Manager) preferredAllocation(ctx context.Context, res string, available, mustInclude sets.Set[string], size int) (sets.Set[string], error) {
	m.mu.Lock()
	info, ok := m.endpoints[res]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("endpoint not found in cache for a registered resource: %s", res)
	}
	if info.opts == nil || !info.opts.GetPreferredAllocationAvailable {
		return sets.New[string](), nil
	}
	resp, err := info.ep.GetPreferredAllocation(ctx, sets.List(available), sets.List(mustInclude), size)
	if err != nil {
		if m.cfg.Policy.PreferredAllocationFallback {
			m.log.Error(err, "GetPreferredAllocation failed; falling back to the manager's own choice", "resourceName", res)
			return sets.New[string](), nil
		}
		return nil, fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %w", err)
	}
	if resp == nil || len(resp.ContainerResponses) == 0 {
		return sets.New[string](), nil
	}
	return sets.New(resp.ContainerResponses[0].DeviceIDs...), nil
}

// sourcesReady asks the embedder whether every pod source is ready. It is called without mu
// held, so the callback may call back into the manager.
func (m *Manager) sourcesReady() bool {
	m.mu.Lock()
	ready := m.sources.SourcesReady
	m.mu.Unlock()
	return ready == nil || ready()
}

// affinity asks the embedder's AffinityStore, if any, for the container's NUMA hint. It is
// called without mu held.
func (m *Manager) affinity(podUID, container string) TopologyHint {
	if m.cfg.TopologyAffinity == nil {
		return TopologyHint{}
	}
	return m.cfg.TopologyAffinity.GetAffinity(podUID, container)
}

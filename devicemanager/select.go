package devicemanager

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/internal/state"
)

// devicesToAllocateWithDeferral is devicesToAllocate, except that a refusal the core's
// deferral decision (state.Rules.Defer) waits out is waited out: the wait's every step
// (retry, sleep until a deadline on the manager's clock, fail) is the core's decision, the
// same one the simulator (package explore) carries out. beforeWait runs before the first wait;
// waiter is the container's place among the admissions that waited (sleepUntil).
func (m *Manager) devicesToAllocateWithDeferral(ctx context.Context, pod *v1.Pod, container, res string, required int, reusable sets.Set[string], waiter **sleeper, beforeWait func()) (sets.Set[string], error) {
	ids, err := m.devicesToAllocate(ctx, pod, container, res, required, reusable)
	if err == nil {
		return ids, nil
	}
	m.mu.Lock()
	d := m.rules.Defer(m.st, res, err, m.cfg.Clock.Now())
	m.mu.Unlock()
	if d == nil {
		return ids, err
	}
	m.log.Info("Deferring admission until the device plugin registers", "pod", klog.KObj(pod),
		"containerName", container, "resourceName", res, "timeout", d.Timeout())
	notified := false
	for {
		if err := m.lockTurn(ctx, waiter); err != nil {
			return nil, d.Cancelled(err)
		}
		changed, devices := m.deviceChange, m.deviceChanges
		w := d.Next(m.st, m.cfg.Clock.Now())
		m.mu.Unlock()
		switch w.Kind {
		case state.WaitRetry:
			ids, err := m.devicesToAllocate(ctx, pod, container, res, required, reusable)
			m.mu.Lock()
			err = d.Retried(m.st, err, m.cfg.Clock.Now())
			m.mu.Unlock()
			return ids, err
		case state.WaitFail:
			return nil, w.Err
		}
		if !notified {
			notified = true
			m.enterWaitOrder(waiter)
			beforeWait()
			if m.cfg.OnAdmissionDeferred != nil {
				m.cfg.OnAdmissionDeferred(string(pod.UID), container, res)
			}
		}
		if err := m.sleepUntil(ctx, waiter, changed, devices, w.Until); err != nil {
			return nil, d.Cancelled(err)
		}
	}
}

// awaitUnknownResource decides what happens to a container asking for a resource no plugin
// has registered (and no checkpoint names), as the core decides it (state.Rules.AwaitUnknown).
// The kubelet admits it without devices, relying on the scheduler. With Policy.DeferAdmission,
// a manager that started less than DeferAdmissionTimeout ago waits, until then, for a plugin
// to register the resource and send its first list, since after a restart or reboot plugins
// come back in any order; it reports true when the resource is served. Past the window, it
// admits as the kubelet does, with a warning that names the resource. A container that was
// running before the restart never waits: it keeps what it has (the restart bypass).
func (m *Manager) awaitUnknownResource(ctx context.Context, pod *v1.Pod, container, res string, waiter **sleeper) (bool, error) {
	if !m.cfg.Policy.DeferAdmission {
		return false, nil
	}
	ready := m.sourcesReady()
	notified := false
	for {
		if err := m.lockTurn(ctx, waiter); err != nil {
			return false, fmt.Errorf("stopped waiting for a device plugin to register %s: %w", res, err)
		}
		changed, devices := m.deviceChange, m.deviceChanges
		now := m.cfg.Clock.Now()
		// A container that ran before the restart keeps what it has (the restart bypass); a
		// device chosen now could not be the one it uses.
		bypass := !ready && m.st.IsContainerAlreadyRunning(string(pod.UID), container)
		w := m.rules.AwaitUnknown(m.st, res, m.startedAt, now, bypass)
		m.mu.Unlock()
		if !w.Wait {
			if !w.Served && !bypass {
				m.log.Info("Warning: admitting a container without devices of a resource no device plugin has registered",
					"pod", klog.KObj(pod), "containerName", container, "resourceName", res)
			}
			return w.Served, nil
		}
		if !notified {
			m.enterWaitOrder(waiter)
			m.log.Info("Deferring admission until a device plugin registers the resource", "pod", klog.KObj(pod),
				"containerName", container, "resourceName", res, "timeout", w.Until.Sub(now))
			if m.cfg.OnAdmissionDeferred != nil {
				m.cfg.OnAdmissionDeferred(string(pod.UID), container, res)
			}
			notified = true
		}
		if err := m.sleepUntil(ctx, waiter, changed, devices, w.Until); err != nil {
			return false, fmt.Errorf("stopped waiting for a device plugin to register %s: %w", res, err)
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

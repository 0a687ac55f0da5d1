package podruntime

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kdm-project/kdm/devicemanager"
)

// The kubelet's crash back-off: 10 s doubling to 5 min, forgotten after 10 min without a crash.
const (
	backOffInitial = 10 * time.Second
	backOffMax     = 5 * time.Minute
)

// containerKey names one container of one pod across its restarts.
type containerKey struct {
	uid  types.UID
	name string
}

type backOffEntry struct {
	delay time.Duration
	last  time.Time // when the last restart was allowed
}

// instances are one container's instances in the current sandbox, newest attempt first.
type instances []*cri.Container

func (is instances) latest() *cri.Container {
	if len(is) == 0 {
		return nil
	}
	return is[0]
}

// lastExited is the newest exited instance other than the latest one.
func (is instances) lastExited() *cri.Container {
	for _, c := range is[min(1, len(is)):] {
		if c.State == cri.ContainerState_CONTAINER_EXITED {
			return c
		}
	}
	return nil
}

// podSync is the state of one pod's sync.
type podSync struct {
	r      *Runtime
	rt     runtimeClients
	pod    *v1.Pod
	log    klog.Logger
	sbID   string
	sbCfg  *cri.PodSandboxConfig
	byName map[string]instances
	// acted is set when the sync changed something, so another sync follows soon.
	acted bool
	// initFailed is set when a regular init container failed and will not be restarted.
	initFailed bool
	message    string
}

// syncPod brings one listed pod toward its spec and returns its status.
func (r *Runtime) syncPod(ctx context.Context, rt runtimeClients, pod *v1.Pod, rec *podRecord) PodStatus {
	s := &podSync{r: r, rt: rt, pod: pod, log: klog.LoggerWithValues(r.log, "pod", klog.KObj(pod), "podUID", pod.UID)}

	var ready *cri.PodSandbox
	for _, sb := range rec.sandboxes {
		if sb.State == cri.PodSandboxState_SANDBOX_READY && (ready == nil || sb.CreatedAt > ready.CreatedAt) {
			ready = sb
		}
	}
	if ready == nil {
		if prev, ok := r.Status(pod.UID); ok && terminal(prev.Phase) {
			return prev // a finished pod is not started again
		}
		if !s.replaceSandbox(ctx, rec) {
			return s.status(ctx, nil)
		}
		return s.status(ctx, nil) // the next sync, soon, creates the containers
	}
	s.sbID = ready.Id
	s.sbCfg = r.sandboxConfig(pod, ready.GetMetadata().GetAttempt())
	s.log = klog.LoggerWithValues(s.log, "podSandboxID", ready.Id)

	// Containers of other sandboxes of the pod are left from a replaced sandbox: remove them.
	var current []*cri.Container
	var stale podRecord
	for _, c := range rec.containers {
		if c.PodSandboxId == ready.Id {
			current = append(current, c)
		} else {
			stale.containers = append(stale.containers, c)
		}
	}
	for _, sb := range rec.sandboxes {
		if sb.Id != ready.Id {
			stale.sandboxes = append(stale.sandboxes, sb)
		}
	}
	if len(stale.containers)+len(stale.sandboxes) > 0 {
		if err := r.killPod(ctx, rt, pod.UID, pod, &stale); err != nil {
			s.log.Error(err, "Removing a replaced sandbox failed; retrying at the next sync")
		}
	}

	s.byName = make(map[string]instances)
	for _, c := range current {
		name := c.GetMetadata().GetName()
		s.byName[name] = append(s.byName[name], c)
	}
	for _, is := range s.byName {
		sort.Slice(is, func(i, j int) bool {
			if a, b := is[i].GetMetadata().GetAttempt(), is[j].GetMetadata().GetAttempt(); a != b {
				return a > b
			}
			return is[i].CreatedAt > is[j].CreatedAt
		})
	}
	s.prune(ctx)

	st := s.status(ctx, ready)
	if terminal(st.Phase) {
		s.stopSidecars(ctx)
	} else if s.syncInit(ctx) {
		s.syncApps(ctx)
	}
	if s.acted {
		r.Trigger()
		st = s.status(ctx, ready)
	}
	return st
}

func terminal(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }

// replaceSandbox removes the pod's sandboxes that are not ready, with their containers, and runs
// a new one. It reports whether the new sandbox runs.
func (s *podSync) replaceSandbox(ctx context.Context, rec *podRecord) bool {
	r, pod := s.r, s.pod
	var attempt uint32
	if len(rec.sandboxes) > 0 {
		// Restart counts go on across sandboxes, as the kubelet's do.
		carried := r.carried[pod.UID]
		if carried == nil {
			carried = make(map[string]uint32)
			r.carried[pod.UID] = carried
		}
		for _, c := range rec.containers {
			if n := c.GetMetadata().GetAttempt() + 1; n > carried[c.GetMetadata().GetName()] {
				carried[c.GetMetadata().GetName()] = n
			}
		}
		for _, sb := range rec.sandboxes {
			attempt = max(attempt, sb.GetMetadata().GetAttempt()+1)
		}
		s.log.Info("Pod sandbox is not ready; replacing it", "sandboxes", len(rec.sandboxes))
	}
	if len(rec.sandboxes)+len(rec.containers) > 0 {
		if err := r.killPod(ctx, s.rt, pod.UID, pod, rec); err != nil {
			s.message = fmt.Sprintf("removing the old sandbox: %v", err)
			s.log.Error(err, "Removing a pod's old sandbox failed; retrying at the next sync")
			return false
		}
	}
	if err := r.ensureImage(ctx, s.rt, r.cfg.SandboxImage, s.log); err != nil {
		s.message = fmt.Sprintf("sandbox image: %v", err)
		s.log.Error(err, "Sandbox image unavailable; retrying at the next sync", "image", r.cfg.SandboxImage)
		return false
	}
	cfg := r.sandboxConfig(pod, attempt)
	if err := ensureLogDir(cfg.LogDirectory); err != nil {
		s.message = err.Error()
		s.log.Error(err, "Creating the pod's log directory failed")
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	resp, err := s.rt.rt.RunPodSandbox(cctx, &cri.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		s.message = fmt.Sprintf("RunPodSandbox: %v", err)
		s.log.Error(err, "Running the pod sandbox failed; retrying at the next sync")
		return false
	}
	s.log.V(2).Info("Started pod sandbox", "podSandboxID", resp.PodSandboxId)
	s.acted = true
	r.Trigger()
	return true
}

// prune removes the exited instances a restart replaced, keeping the newest exited one of each
// container for its status, and any older instance still running (none should be).
func (s *podSync) prune(ctx context.Context) {
	for name, is := range s.byName {
		keep := instances{is[0]}
		if e := is.lastExited(); e != nil {
			keep = append(keep, e)
		}
		var drop []*cri.Container
		for _, c := range is[1:] {
			if len(keep) == 2 && c == keep[1] {
				continue
			}
			drop = append(drop, c)
		}
		if len(drop) == 0 {
			continue
		}
		if err := s.r.stopContainers(ctx, s.rt, s.pod, drop); err != nil {
			s.log.Error(err, "Stopping a replaced container failed", "containerName", name)
			continue
		}
		for _, c := range drop {
			if err := s.r.removeContainer(ctx, s.rt, c.Id); err != nil {
				s.log.Error(err, "Removing a replaced container failed", "containerName", name, "containerID", c.Id)
			}
		}
		s.byName[name] = keep
	}
}

// syncInit runs the init containers: regular ones one at a time to a zero exit, sidecars started
// and kept. It reports whether the pod is initialized, so the app containers may start.
func (s *podSync) syncInit(ctx context.Context) bool {
	appsStarted := false
	for _, c := range s.pod.Spec.Containers {
		if len(s.byName[c.Name]) > 0 {
			appsStarted = true
		}
	}
	for i := range s.pod.Spec.InitContainers {
		c := &s.pod.Spec.InitContainers[i]
		latest := s.byName[c.Name].latest()
		if isSidecar(c) {
			switch {
			case latest == nil:
				if !s.start(ctx, c, 0) {
					return false
				}
			case latest.State == cri.ContainerState_CONTAINER_CREATED:
				if !s.startCreated(ctx, c, latest) {
					return false
				}
			case latest.State == cri.ContainerState_CONTAINER_EXITED:
				s.restart(ctx, c, latest) // it started once: the next ones need not wait
			}
			continue
		}
		if appsStarted {
			continue // initialized before: regular init containers do not run again
		}
		switch {
		case latest == nil:
			s.start(ctx, c, 0)
			return false
		case latest.State == cri.ContainerState_CONTAINER_CREATED:
			s.startCreated(ctx, c, latest)
			return false
		case latest.State == cri.ContainerState_CONTAINER_EXITED:
			code, ok := s.exitCode(ctx, latest)
			if !ok {
				return false
			}
			if code == 0 {
				continue
			}
			if s.pod.Spec.RestartPolicy == v1.RestartPolicyNever {
				s.initFailed = true
				return false
			}
			s.restart(ctx, c, latest)
			return false
		default:
			return false // running or unknown: wait for it
		}
	}
	return true
}

// syncApps starts the app containers not started yet and restarts the exited ones the pod's
// restart policy restarts.
func (s *podSync) syncApps(ctx context.Context) {
	for i := range s.pod.Spec.Containers {
		c := &s.pod.Spec.Containers[i]
		latest := s.byName[c.Name].latest()
		switch {
		case latest == nil:
			s.start(ctx, c, 0)
		case latest.State == cri.ContainerState_CONTAINER_CREATED:
			s.startCreated(ctx, c, latest)
		case latest.State == cri.ContainerState_CONTAINER_EXITED:
			code, ok := s.exitCode(ctx, latest)
			if ok && willRestart(s.pod.Spec.RestartPolicy, code) {
				s.restart(ctx, c, latest)
			}
		}
	}
}

func isSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

func willRestart(policy v1.RestartPolicy, exitCode int32) bool {
	switch policy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

// stopSidecars stops the running sidecars of a finished pod.
func (s *podSync) stopSidecars(ctx context.Context) {
	var running []*cri.Container
	for i := range s.pod.Spec.InitContainers {
		c := &s.pod.Spec.InitContainers[i]
		if l := s.byName[c.Name].latest(); isSidecar(c) && l != nil && l.State == cri.ContainerState_CONTAINER_RUNNING {
			running = append(running, l)
		}
	}
	if len(running) == 0 {
		return
	}
	if err := s.r.stopContainers(ctx, s.rt, s.pod, running); err != nil {
		s.log.Error(err, "Stopping the sidecars of a finished pod failed")
	}
	s.acted = true
}

// restart starts the next instance of an exited container unless it is in crash back-off.
func (s *podSync) restart(ctx context.Context, c *v1.Container, exited *cri.Container) {
	r := s.r
	key := containerKey{s.pod.UID, c.Name}
	seen, ok := r.exitSeen[exited.Id]
	if !ok {
		seen = r.clock.Now()
		r.exitSeen[exited.Id] = seen
	}
	now := r.clock.Now()
	e := r.backoff[key]
	if e != nil && now.Sub(e.last) > 2*backOffMax {
		e = nil // calm long enough: start over
	}
	if e != nil && now.Sub(seen) < e.delay {
		wait := e.delay - now.Sub(seen)
		r.waiting[key] = waitReason{reasonCrashLoopBackOff,
			fmt.Sprintf("back-off %v restarting failed container=%s pod=%s", e.delay, c.Name, klog.KObj(s.pod))}
		s.log.V(3).Info("Container in crash back-off", "containerName", c.Name, "backOff", e.delay, "remaining", wait)
		return
	}
	if e == nil {
		e = &backOffEntry{delay: backOffInitial}
	} else {
		e.delay = min(2*e.delay, backOffMax)
	}
	e.last = now
	r.backoff[key] = e
	s.start(ctx, c, exited.GetMetadata().GetAttempt()+1)
}

// start creates and starts a container instance. It reports whether the container started.
func (s *podSync) start(ctx context.Context, c *v1.Container, restart uint32) bool {
	r := s.r
	key := containerKey{s.pod.UID, c.Name}
	if n := r.carried[s.pod.UID][c.Name]; n > restart {
		restart = n
	}
	log := klog.LoggerWithValues(s.log, "containerName", c.Name, "image", c.Image)
	fail := func(reason string, err error) bool {
		r.waiting[key] = waitReason{reason, err.Error()}
		s.message = fmt.Sprintf("container %s: %v", c.Name, err)
		log.Error(err, "Starting container failed; retrying at the next sync", "reason", reason)
		return false
	}
	if err := r.ensureImage(ctx, s.rt, c.Image, log); err != nil {
		return fail(reasonErrImagePull, err)
	}
	var opts *devicemanager.RunContainerOptions
	if r.cfg.RunOptions != nil {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
		o, err := r.cfg.RunOptions(cctx, s.pod, c)
		cancel()
		if err != nil {
			return fail(reasonConfigError, fmt.Errorf("device run options: %w", err))
		}
		opts = o
	}
	if err := ensureLogDir(filepath.Join(s.sbCfg.LogDirectory, c.Name)); err != nil {
		return fail(reasonCreateError, err)
	}
	cfg := r.containerConfig(s.pod, c, restart, opts)
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	resp, err := s.rt.rt.CreateContainer(cctx, &cri.CreateContainerRequest{PodSandboxId: s.sbID, Config: cfg, SandboxConfig: s.sbCfg})
	if err != nil {
		return fail(reasonCreateError, fmt.Errorf("CreateContainer: %w", err))
	}
	s.acted = true
	crashAt(CrashAfterCreate)
	if _, err := s.rt.rt.StartContainer(cctx, &cri.StartContainerRequest{ContainerId: resp.ContainerId}); err != nil {
		return fail(reasonRunError, fmt.Errorf("StartContainer %s: %w", resp.ContainerId, err))
	}
	crashAt(CrashAfterStart)
	delete(r.waiting, key)
	log.V(2).Info("Started container", "containerID", resp.ContainerId, "restartCount", restart)
	return true
}

// startCreated starts an instance created but not started (a kdm restart between the two).
func (s *podSync) startCreated(ctx context.Context, c *v1.Container, created *cri.Container) bool {
	key := containerKey{s.pod.UID, c.Name}
	cctx, cancel := context.WithTimeout(ctx, s.r.cfg.RPCTimeout)
	defer cancel()
	s.acted = true
	if _, err := s.rt.rt.StartContainer(cctx, &cri.StartContainerRequest{ContainerId: created.Id}); err != nil {
		s.r.waiting[key] = waitReason{reasonRunError, err.Error()}
		s.log.Error(err, "Starting a created container failed; retrying at the next sync", "containerName", c.Name, "containerID", created.Id)
		return false
	}
	delete(s.r.waiting, key)
	s.log.V(2).Info("Started created container", "containerName", c.Name, "containerID", created.Id)
	return true
}

// containerStatus returns the runtime's status of a container, cached while its state is the
// listed one (an exited container's status does not change).
func (s *podSync) containerStatus(ctx context.Context, c *cri.Container) *cri.ContainerStatus {
	if st, ok := s.r.cstatus[c.Id]; ok && st.State == c.State {
		return st
	}
	cctx, cancel := context.WithTimeout(ctx, s.r.cfg.RPCTimeout)
	defer cancel()
	resp, err := s.rt.rt.ContainerStatus(cctx, &cri.ContainerStatusRequest{ContainerId: c.Id})
	if err != nil || resp.Status == nil {
		s.log.Error(err, "ContainerStatus failed", "containerID", c.Id)
		return nil
	}
	s.r.cstatus[c.Id] = resp.Status
	return resp.Status
}

func (s *podSync) exitCode(ctx context.Context, c *cri.Container) (int32, bool) {
	st := s.containerStatus(ctx, c)
	if st == nil || st.State != cri.ContainerState_CONTAINER_EXITED {
		return 0, false
	}
	return st.ExitCode, true
}

// status computes the pod's status from its containers in sandbox (nil: none ready).
// Statuses are mostly cached by the sync that just ran; a miss asks the runtime.
func (s *podSync) status(ctx context.Context, sandbox *cri.PodSandbox) PodStatus {
	st := PodStatus{Message: s.message}
	if sandbox != nil {
		st.SandboxID = sandbox.Id
	}
	initialized := true
	for i := range s.pod.Spec.InitContainers {
		c := &s.pod.Spec.InitContainers[i]
		cs := s.statusOf(ctx, c, reasonPodInitializing)
		if sandbox == nil || !isSidecar(c) && (cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0) {
			initialized = false
		}
		if !isSidecar(c) {
			// A regular init container that finished is neither ready nor started, as the kubelet says.
			cs.Ready = cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
	}
	appWaiting := reasonContainerCreating
	if !initialized {
		appWaiting = reasonPodInitializing
	}
	appsStarted := false
	for i := range s.pod.Spec.Containers {
		cs := s.statusOf(ctx, &s.pod.Spec.Containers[i], appWaiting)
		if cs.ContainerID != "" {
			appsStarted = true
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	if appsStarted {
		initialized = true // init containers pruned or replaced after the pod started
	}
	st.Phase = phase(s.pod.Spec.RestartPolicy, initialized, s.initFailed, st.ContainerStatuses)
	return st
}

// statusOf is one container's kubelet-shaped status; noInstance is its waiting reason before
// its first instance.
func (s *podSync) statusOf(ctx context.Context, c *v1.Container, noInstance string) v1.ContainerStatus {
	cs := v1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr.To(false)}
	key := containerKey{s.pod.UID, c.Name}
	w, hasWait := s.r.waiting[key]
	is := s.byName[c.Name]
	latest := is.latest()
	if latest == nil {
		cs.State.Waiting = &v1.ContainerStateWaiting{Reason: noInstance}
		if hasWait {
			cs.State.Waiting = &v1.ContainerStateWaiting{Reason: w.reason, Message: w.message}
		}
		cs.RestartCount = int32(s.r.carried[s.pod.UID][c.Name])
		return cs
	}
	rs := s.containerStatus(ctx, latest)
	cs.ContainerID = s.r.runtimeName() + "://" + latest.Id
	cs.RestartCount = int32(latest.GetMetadata().GetAttempt())
	if rs != nil {
		cs.ImageID = rs.ImageRef
	}
	switch {
	case rs == nil:
		cs.State.Waiting = &v1.ContainerStateWaiting{Reason: "ContainerStatusUnknown"}
	case rs.State == cri.ContainerState_CONTAINER_RUNNING:
		cs.State.Running = &v1.ContainerStateRunning{StartedAt: nanoTime(rs.StartedAt)}
		cs.Ready, cs.Started = true, ptr.To(true)
	case rs.State == cri.ContainerState_CONTAINER_EXITED:
		term := terminated(latest.Id, rs, s.r.runtimeName())
		if hasWait {
			cs.State.Waiting = &v1.ContainerStateWaiting{Reason: w.reason, Message: w.message}
			cs.LastTerminationState.Terminated = term
		} else {
			cs.State.Terminated = term
		}
	case rs.State == cri.ContainerState_CONTAINER_CREATED:
		cs.State.Waiting = &v1.ContainerStateWaiting{Reason: reasonContainerCreating}
		if hasWait {
			cs.State.Waiting = &v1.ContainerStateWaiting{Reason: w.reason, Message: w.message}
		}
	default:
		cs.State.Waiting = &v1.ContainerStateWaiting{Reason: "ContainerStatusUnknown"}
	}
	if cs.LastTerminationState.Terminated == nil {
		if prev := is.lastExited(); prev != nil {
			if ps := s.containerStatus(ctx, prev); ps != nil && ps.State == cri.ContainerState_CONTAINER_EXITED {
				cs.LastTerminationState.Terminated = terminated(prev.Id, ps, s.r.runtimeName())
			}
		}
	}
	return cs
}

func terminated(id string, rs *cri.ContainerStatus, runtime string) *v1.ContainerStateTerminated {
	return &v1.ContainerStateTerminated{
		ExitCode:    rs.ExitCode,
		Reason:      rs.Reason,
		Message:     rs.Message,
		StartedAt:   nanoTime(rs.StartedAt),
		FinishedAt:  nanoTime(rs.FinishedAt),
		ContainerID: runtime + "://" + id,
	}
}

func nanoTime(ns int64) metav1.Time {
	if ns == 0 {
		return metav1.Time{}
	}
	return metav1.NewTime(time.Unix(0, ns))
}

// phase is the pod's phase from its app containers' statuses, as the kubelet computes it: a
// container waiting after a termination counts as stopped (it will restart).
func phase(policy v1.RestartPolicy, initialized, initFailed bool, apps []v1.ContainerStatus) v1.PodPhase {
	if initFailed {
		return v1.PodFailed
	}
	if !initialized {
		return v1.PodPending
	}
	var running, waiting, stopped, succeeded int
	for _, cs := range apps {
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			stopped++
			if cs.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case cs.LastTerminationState.Terminated != nil:
			stopped++
		default:
			waiting++
		}
	}
	switch {
	case waiting > 0:
		return v1.PodPending
	case running > 0:
		return v1.PodRunning
	case stopped > 0:
		if policy == v1.RestartPolicyAlways || policy == "" {
			return v1.PodRunning
		}
		if stopped == succeeded {
			return v1.PodSucceeded
		}
		if policy == v1.RestartPolicyNever {
			return v1.PodFailed
		}
		return v1.PodRunning
	default:
		return v1.PodPending
	}
}

func podRef(pod *v1.Pod) klog.ObjectRef {
	if pod == nil {
		return klog.ObjectRef{}
	}
	return klog.KObj(pod)
}

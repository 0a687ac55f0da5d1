package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/podruntime"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/devicemanager"
)

// containerRoom runs the admitted pods as containers through a CRI runtime (package
// podruntime), when Config.ContainerRuntimeEndpoint names one. It decides which pods run and
// when a removed pod's devices may go: a pod the sources removed stays active for the device
// manager, its devices held, until the runtime reports that none of its containers and not its
// sandbox are left.
type containerRoom struct {
	a        *Agent
	endpoint string
	rt       *podruntime.Runtime
	// ready is closed once the pod sources are ready: only then does the runtime reconcile,
	// since before it a pod that ran before a restart may not be listed again yet.
	ready     chan struct{}
	readyOnce sync.Once

	// mu guards stopping, name and version; where both are held, Agent.mu is taken first.
	mu sync.Mutex
	// stopping are the removed pods whose containers or sandbox may still exist.
	stopping map[types.UID]*v1.Pod
	// name and version are the runtime's, once it answered.
	name, version string
}

func newContainerRoom(a *Agent) (*containerRoom, error) {
	c := &containerRoom{a: a, endpoint: a.cfg.ContainerRuntimeEndpoint, ready: make(chan struct{}),
		stopping: map[types.UID]*v1.Pod{}}
	rt, err := podruntime.New(podruntime.Config{
		Endpoint:     c.endpoint,
		SandboxImage: a.cfg.SandboxImage,
		PodLogsDir:   filepath.Join(a.cfg.RootDir, "kdm", "pod-logs"),
		Pods:         c.pods,
		RunOptions:   c.runOptions,
		OnStatus:     c.onStatus,
		OnStopped:    c.onStopped,
		Logger:       a.log,
		Clock:        a.clock,
	})
	if err != nil {
		return nil, fmt.Errorf("container runtime: %w", err)
	}
	c.rt = rt
	return c, nil
}

// run waits for the pod sources, then runs the runtime's loop until ctx ends. Containers keep
// running when kdm stops: the next start adopts them.
func (c *containerRoom) run(ctx context.Context) error {
	select {
	case <-c.ready:
	case <-ctx.Done():
		return nil
	}
	if _, err := c.askVersion(ctx); err != nil {
		c.a.log.Error(err, "Container runtime does not answer yet", "endpoint", c.endpoint)
	}
	return c.rt.Run(ctx)
}

// runtimeVersionTimeout bounds the version question asked at start for the Node's nodeInfo.
const runtimeVersionTimeout = 5 * time.Second

// askVersion asks the runtime its name and version, keeps them for the views and returns them
// as the Node's nodeInfo.containerRuntimeVersion names a runtime ("containerd://1.6.20").
func (c *containerRoom) askVersion(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, runtimeVersionTimeout)
	defer cancel()
	name, version, err := c.rt.Version(ctx)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	known := c.name != ""
	c.name, c.version = name, version
	c.mu.Unlock()
	if !known {
		c.a.log.Info("Container runtime connected", "endpoint", c.endpoint, "runtimeName", name, "runtimeVersion", version)
	}
	return name + "://" + version, nil
}

// sourcesReady lets the runtime reconcile: every pod that should run is listed by now.
func (c *containerRoom) sourcesReady() {
	c.readyOnce.Do(func() { close(c.ready) })
}

// pods lists the pods whose containers should run: admitted, still in a source, not removed.
func (c *containerRoom) pods() []*v1.Pod {
	a := c.a
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*v1.Pod, 0, len(a.pods))
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid, p := range a.pods {
		// A pod its source listed again while it was stopping (a manifest deleted and put
		// back with its UID) is no longer removed.
		delete(c.stopping, uid)
		if r := a.results[uid]; r != nil && r.Phase == podresult.PhaseAdmitted {
			out = append(out, p)
		}
	}
	return out
}

// runOptions gives a container's devices just before it is created: the device manager calls
// the plugin's PreStartContainer here when the plugin asks for it (and not at admission, which
// records the options through Manager.ContainerRunOptions).
func (c *containerRoom) runOptions(ctx context.Context, pod *v1.Pod, ctr *v1.Container) (*devicemanager.RunContainerOptions, error) {
	return c.a.manager.GetDeviceRunContainerOptions(ctx, pod, ctr)
}

// onStatus records the runtime's view of a pod in its result.
func (c *containerRoom) onStatus(uid types.UID, s podruntime.PodStatus) {
	c.record(uid, &podresult.RuntimeStatus{ContainersRun: true, Phase: s.Phase, Message: s.Message,
		SandboxID: s.SandboxID, InitContainerStatuses: s.InitContainerStatuses, ContainerStatuses: s.ContainerStatuses})
}

// stop asks the runtime to stop and remove a removed pod's containers and sandbox; its devices
// are released once that is done (onStopped).
func (c *containerRoom) stop(pod *v1.Pod) {
	grace := pod.Spec.TerminationGracePeriodSeconds
	if grace == nil {
		g := int64(podruntime.DefaultStopGracePeriod / time.Second)
		grace = &g
	}
	c.stopWith(pod, grace)
}

// stopRestored is stop for a pod known only from its result (removed while kdm was down): its
// grace period is the one its Terminating mark recorded, else the one on each container.
func (c *containerRoom) stopRestored(r *podresult.PodResult) {
	pod := podresult.PodOf(r)
	c.stopWith(pod, pod.Spec.TerminationGracePeriodSeconds)
}

// stopWith marks the pod stopping (its devices stay held), asks the runtime to stop it and
// queues its Terminating mark.
func (c *containerRoom) stopWith(pod *v1.Pod, grace *int64) {
	c.mu.Lock()
	c.stopping[pod.UID] = pod
	c.mu.Unlock()
	c.rt.StopPod(pod.UID)
	c.a.queueTerminating(pod, grace)
}

// onStopped releases the devices of a removed pod once nothing of it runs.
func (c *containerRoom) onStopped(uid types.UID) {
	c.mu.Lock()
	pod, ok := c.stopping[uid]
	delete(c.stopping, uid)
	c.mu.Unlock()
	if !ok {
		return
	}
	if _, back := c.a.podByUID(uid); back {
		// Its source listed it again (a manifest deleted and put back with its UID) while
		// its old containers stopped: it is tracked and admitted anew, keeping its devices
		// and its result; the runtime starts its containers again.
		return
	}
	c.a.queueRelease(pod)
}

// isStopping reports whether the removed pod's containers or sandbox may still exist.
func (c *containerRoom) isStopping(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.stopping[uid]
	return ok
}

// stoppingPods lists the removed pods whose containers may still run: the device manager
// counts them as active, so their devices go to no other pod.
func (c *containerRoom) stoppingPods() []*v1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*v1.Pod, 0, len(c.stopping))
	for _, p := range c.stopping {
		out = append(out, p)
	}
	return out
}

// info says what runs, for /status and the page; a nil room (no runtime) says that nothing
// does.
func (c *containerRoom) info() statusapi.RuntimeInfo {
	if c == nil {
		return statusapi.RuntimeInfo{Message: podresult.NoContainersMessage}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	msg := "admitted pods run as containers through " + c.endpoint
	if c.name != "" {
		msg = fmt.Sprintf("admitted pods run as containers through %s %s", c.name, c.version)
	}
	return statusapi.RuntimeInfo{ContainersRun: true, Endpoint: c.endpoint, Name: c.name, Version: c.version, Message: msg}
}

// record writes the runtime's view of a pod into its result and publishes it.
func (c *containerRoom) record(uid types.UID, s *podresult.RuntimeStatus) {
	a := c.a
	a.mu.Lock()
	prev := a.results[uid]
	pod, tracked := a.pods[uid]
	a.mu.Unlock()
	if prev == nil {
		return
	}
	if !tracked {
		pod = podresult.PodOf(prev) // removed, stopping: its result stays until nothing of it runs
	}
	a.updateResult(pod, func(r *podresult.PodResult) bool {
		r.Runtime = s
		return true
	})
	if s.Terminal() && !prev.Runtime.Terminal() {
		a.manager.UpdateAllocatedDevices() // a finished pod's devices go back to the pool
	}
}

package podruntime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kdm-project/kdm/devicemanager"
)

// Defaults of the Config's durations.
const (
	DefaultSyncPeriod      = time.Second
	DefaultRPCTimeout      = 2 * time.Minute
	DefaultStopGracePeriod = 30 * time.Second
)

// Config is everything a Runtime needs. New validates it; its errors name the field.
type Config struct {
	// Endpoint is the CRI endpoint in the kubelet's flag form: "unix:///path/containerd.sock".
	Endpoint string
	// SandboxImage is the image of each pod's sandbox (the pause image). It must be the image
	// the runtime itself runs sandboxes with (containerd's sandbox_image); the Runtime pulls it
	// when the runtime does not hold it. Required.
	SandboxImage string
	// PodLogsDir is the root of the container logs:
	// <PodLogsDir>/<namespace>_<name>_<uid>/<container>/<restartCount>.log. Required.
	PodLogsDir string
	// Pods lists the pods that should be running now (admitted and not removed). It is called
	// from Run's loop, once per sync, and must not block.
	Pods func() []*v1.Pod
	// RunOptions returns a container's device run options just before it is created (each time,
	// restarts included). An error leaves the container waiting (reason
	// CreateContainerConfigError) and is retried on the next sync. A nil func or a nil result
	// means no device options.
	RunOptions func(ctx context.Context, pod *v1.Pod, c *v1.Container) (*devicemanager.RunContainerOptions, error)
	// OnStatus, when set, is called after a pod's status changed (any container state, restart
	// count, phase), from Run's goroutine, with no lock held.
	OnStatus func(uid types.UID, s PodStatus)
	// OnStopped, when set, is called once every container and the sandbox of a pod that Pods no
	// longer lists (or that the runtime holds but Pods never listed: an orphan) are stopped and
	// removed. Only then may the pod's devices be released. Called from Run's goroutine.
	OnStopped func(uid types.UID)
	// SyncPeriod is the relist and sync period; default DefaultSyncPeriod. It runs on real time.
	SyncPeriod time.Duration
	// RPCTimeout bounds each CRI call; default DefaultRPCTimeout (the kubelet's runtime request
	// timeout). StopContainer gets the grace period on top.
	RPCTimeout time.Duration
	// StopGracePeriod, when set, is the grace period of every container stop. When zero, a pod's
	// spec.terminationGracePeriodSeconds is used, else DefaultStopGracePeriod.
	StopGracePeriod time.Duration
	// Logger receives the structured logs; default klog.Background().
	Logger klog.Logger
	// Clock measures the crash back-off; default the real clock.
	Clock clock.Clock
}

// PodStatus is a pod's status as the runtime reports it, shaped like the kubelet's.
type PodStatus struct {
	// Phase is Pending, Running, Succeeded or Failed.
	Phase v1.PodPhase
	// SandboxID is the ID of the pod's current sandbox, empty before one runs.
	SandboxID string
	// InitContainerStatuses and ContainerStatuses follow the spec's order: State
	// (Waiting/Running/Terminated with ExitCode, Reason, StartedAt, FinishedAt),
	// LastTerminationState, Ready, Started, RestartCount, ContainerID ("containerd://<id>"),
	// Image and ImageID.
	InitContainerStatuses []v1.ContainerStatus
	ContainerStatuses     []v1.ContainerStatus
	// Message says why the pod is not progressing, when it is not.
	Message string
}

// Runtime runs pods through a CRI runtime. Create it with New, then call Run once.
type Runtime struct {
	cfg   Config
	log   klog.Logger
	clock clock.Clock

	trigger chan struct{}

	mu       sync.Mutex
	statuses map[types.UID]PodStatus
}

// New validates cfg, fills its defaults and returns a Runtime. It starts no goroutine and does not
// connect: Run does.
func New(cfg Config) (*Runtime, error) {
	if !strings.HasPrefix(cfg.Endpoint, "unix://") || len(cfg.Endpoint) == len("unix://") {
		return nil, fmt.Errorf("podruntime: Config.Endpoint %q: want unix:///path/to/socket", cfg.Endpoint)
	}
	if cfg.SandboxImage == "" {
		return nil, errors.New("podruntime: Config.SandboxImage is required")
	}
	if cfg.PodLogsDir == "" {
		return nil, errors.New("podruntime: Config.PodLogsDir is required")
	}
	if cfg.Pods == nil {
		return nil, errors.New("podruntime: Config.Pods is required")
	}
	if cfg.SyncPeriod < 0 || cfg.RPCTimeout < 0 || cfg.StopGracePeriod < 0 {
		return nil, errors.New("podruntime: Config.SyncPeriod, RPCTimeout and StopGracePeriod must not be negative")
	}
	if cfg.SyncPeriod == 0 {
		cfg.SyncPeriod = DefaultSyncPeriod
	}
	if cfg.RPCTimeout == 0 {
		cfg.RPCTimeout = DefaultRPCTimeout
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = klog.Background()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Runtime{
		cfg:      cfg,
		log:      cfg.Logger,
		clock:    cfg.Clock,
		trigger:  make(chan struct{}, 1),
		statuses: make(map[types.UID]PodStatus),
	}, nil
}

// Run connects to the runtime and syncs every SyncPeriod, and soon after each Trigger, until ctx
// ends. It returns when ctx ends, with every goroutine it started joined. It does not stop
// containers on return: a restarted Runtime adopts them.
func (r *Runtime) Run(ctx context.Context) error {
	return errors.New("podruntime: not implemented")
}

// Trigger asks for a sync soon (a pod was admitted or removed). It never blocks.
func (r *Runtime) Trigger() {
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// Status returns the last status of the pod, and whether the Runtime has one.
func (r *Runtime) Status(uid types.UID) (PodStatus, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.statuses[uid]
	return s, ok
}

// Version returns the runtime's name and version ("containerd", "1.6.20").
func (r *Runtime) Version(ctx context.Context) (name, version string, err error) {
	return "", "", errors.New("podruntime: not implemented")
}

package podruntime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
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
	// longer lists (or that the runtime holds but Pods never listed: an orphan, or that StopPod
	// named) are stopped and removed. Only then may the pod's devices be released. Called from
	// the goroutine that stopped the pod (one per pod, kill.go): for different pods, at the
	// same time.
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

	// Owned by Run's goroutine: no lock.
	known    map[types.UID]*v1.Pod           // pods listed by a sync, until removed
	backoff  map[containerKey]*backOffEntry  // crash back-off per container
	waiting  map[containerKey]waitReason     // why a container that should run does not
	exitSeen map[string]time.Time            // when an exited container was first seen (Clock)
	cstatus  map[string]*cri.ContainerStatus // the runtime's last status of each container
	carried  map[types.UID]map[string]uint32 // restart counts carried over a replaced sandbox
	killing  map[types.UID]bool              // pods a goroutine of their own is stopping (kill.go)
	kills    sync.WaitGroup                  // those goroutines

	mu       sync.Mutex
	running  bool                    // Run was called
	conn     *grpc.ClientConn        // while Run runs
	runtime  string                  // the runtime's name, for container IDs ("containerd")
	statuses map[types.UID]PodStatus // the last status of each listed pod
	// stopRequests are the pods StopPod asked to stop, until a sync handles them.
	stopRequests map[types.UID]bool
	// killed are the pod stops that ended, until the next sync forgets them (kill.go).
	killed []killOutcome
}

// runtimeClients are the CRI services of one connection.
type runtimeClients struct {
	rt  cri.RuntimeServiceClient
	img cri.ImageServiceClient
}

func newClients(conn *grpc.ClientConn) runtimeClients {
	return runtimeClients{rt: cri.NewRuntimeServiceClient(conn), img: cri.NewImageServiceClient(conn)}
}

func (r *Runtime) dial() (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(r.cfg.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("podruntime: dialing %s: %w", r.cfg.Endpoint, err)
	}
	return conn, nil
}

// runtimeName is the name that prefixes container IDs in statuses.
func (r *Runtime) runtimeName() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runtime
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
		known:    make(map[types.UID]*v1.Pod),
		backoff:  make(map[containerKey]*backOffEntry),
		waiting:  make(map[containerKey]waitReason),
		exitSeen: make(map[string]time.Time),
		cstatus:  make(map[string]*cri.ContainerStatus),
		carried:  make(map[types.UID]map[string]uint32),
		killing:  make(map[types.UID]bool),
		runtime:  "containerd",
		statuses: make(map[types.UID]PodStatus),
	}, nil
}

// Run connects to the runtime and syncs every SyncPeriod, and soon after each Trigger, until ctx
// ends. It returns when ctx ends, with every goroutine it started joined. It does not stop
// containers on return: a restarted Runtime adopts them.
func (r *Runtime) Run(ctx context.Context) error {
	conn, err := r.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	defer r.kills.Wait() // before the connection closes: the stops use it
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return errors.New("podruntime: Run called twice")
	}
	r.running, r.conn = true, conn
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.conn = nil
		r.mu.Unlock()
	}()
	rt := newClients(conn)

	// The runtime's name prefixes container IDs; wait for the runtime to answer before the
	// first sync, so that a restart never mistakes an unreachable runtime for an empty one.
	ticker := time.NewTicker(r.cfg.SyncPeriod)
	defer ticker.Stop()
	for {
		name, version, err := r.version(ctx, rt)
		if err == nil {
			r.mu.Lock()
			r.runtime = name
			r.mu.Unlock()
			r.log.Info("Connected to the container runtime", "endpoint", r.cfg.Endpoint, "runtimeName", name, "runtimeVersion", version)
			break
		}
		r.log.Error(err, "Container runtime not answering; retrying", "endpoint", r.cfg.Endpoint)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
	for {
		r.syncAll(ctx, rt)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-r.trigger:
		}
	}
}

// StopPod asks for every container and the sandbox of the pod to be stopped and removed. Pods
// must no longer list the pod. OnStopped(uid) follows once nothing of it is left, also when the
// runtime holds nothing of it (it was removed before it started, or while no Runtime ran):
// so a caller that holds a pod's devices until OnStopped never holds them for ever. It never
// blocks; a request for a pod that Pods still lists is ignored.
func (r *Runtime) StopPod(uid types.UID) {
	r.mu.Lock()
	if r.stopRequests == nil {
		r.stopRequests = make(map[types.UID]bool)
	}
	r.stopRequests[uid] = true
	r.mu.Unlock()
	r.Trigger()
}

// takeStopRequests returns and clears the pending StopPod requests.
func (r *Runtime) takeStopRequests() map[types.UID]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	req := r.stopRequests
	r.stopRequests = nil
	return req
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
// It uses Run's connection while Run runs, else a connection of its own for the call.
func (r *Runtime) Version(ctx context.Context) (name, version string, err error) {
	r.mu.Lock()
	conn := r.conn
	r.mu.Unlock()
	if conn == nil {
		if conn, err = r.dial(); err != nil {
			return "", "", err
		}
		defer conn.Close()
	}
	return r.version(ctx, newClients(conn))
}

func (r *Runtime) version(ctx context.Context, rt runtimeClients) (name, version string, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	v, err := rt.rt.Version(ctx, &cri.VersionRequest{})
	if err != nil {
		return "", "", fmt.Errorf("podruntime: Version: %w", err)
	}
	return v.RuntimeName, v.RuntimeVersion, nil
}

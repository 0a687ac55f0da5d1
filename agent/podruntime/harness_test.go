package podruntime

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"

	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/internal/containerdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait for the runtime; it is a failure condition, not a timing.
const waitTimeout = 60 * time.Second

// harness is a private containerd with the probe image, and the pod source of Runtimes on it.
type harness struct {
	t       *testing.T
	ctd     *containerdtest.Containerd
	cri     cri.RuntimeServiceClient
	probe   string
	sandbox string
	logs    string

	mu      sync.Mutex
	pods    []*v1.Pod
	stopped []types.UID
	// onStopped, when set, runs in OnStopped before the UID is recorded.
	onStopped func(types.UID)
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, ctd: containerdtest.Start(t), logs: t.TempDir()}
	h.probe, h.sandbox = containerdtest.ImportProbe(t, h.ctd)
	h.cri = h.ctd.Dial(t)
	return h
}

func (h *harness) setPods(pods ...*v1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pods = pods
}

func (h *harness) listPods() []*v1.Pod {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*v1.Pod(nil), h.pods...)
}

func (h *harness) stoppedUIDs() []types.UID {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]types.UID(nil), h.stopped...)
}

// runtimeOpts adjusts a Runtime's Config.
type runtimeOpts func(*Config)

func withRunOptions(f func(ctx context.Context, pod *v1.Pod, c *v1.Container) (*devicemanager.RunContainerOptions, error)) runtimeOpts {
	return func(c *Config) { c.RunOptions = f }
}

func withClock(clk clock.Clock) runtimeOpts { return func(c *Config) { c.Clock = clk } }

// start runs a Runtime on the harness until the returned stop is called (or the test ends).
func (h *harness) start(opts ...runtimeOpts) (*Runtime, func()) {
	t := h.t
	cfg := Config{
		Endpoint:        h.ctd.Endpoint(),
		SandboxImage:    h.sandbox,
		PodLogsDir:      h.logs,
		Pods:            h.listPods,
		StopGracePeriod: 5 * time.Second,
		SyncPeriod:      100 * time.Millisecond,
		Logger:          ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))),
		OnStopped: func(uid types.UID) {
			// Recorded before the test's hook runs: a test woken by its hook reads the record.
			h.mu.Lock()
			f := h.onStopped
			h.stopped = append(h.stopped, uid)
			h.mu.Unlock()
			if f != nil {
				f(uid)
			}
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return r, stop
}

// waitStatus waits until the pod's status satisfies ok and returns it.
func waitStatus(t *testing.T, r *Runtime, uid types.UID, what string, ok func(PodStatus) bool) PodStatus {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		s, found := r.Status(uid)
		if found && ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: not %s within %v; last status (found %v): %+v", uid, what, waitTimeout, found, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func phaseIs(p v1.PodPhase) func(PodStatus) bool {
	return func(s PodStatus) bool { return s.Phase == p }
}

// pod is a pod of probe containers.
func (h *harness) pod(name string, policy v1.RestartPolicy, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{RestartPolicy: policy, Containers: containers},
	}
}

func (h *harness) container(name string, env ...string) v1.Container {
	c := v1.Container{Name: name, Image: h.probe}
	for i := 0; i+1 < len(env); i += 2 {
		c.Env = append(c.Env, v1.EnvVar{Name: env[i], Value: env[i+1]})
	}
	return c
}

// runtimeHolds lists what containerd holds of the pod: its containers and sandboxes.
func (h *harness) runtimeHolds(uid types.UID) (containers []*cri.Container, sandboxes []*cri.PodSandbox) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sel := map[string]string{LabelPodUID: string(uid)}
	cs, err := h.cri.ListContainers(ctx, &cri.ListContainersRequest{Filter: &cri.ContainerFilter{LabelSelector: sel}})
	if err != nil {
		h.t.Errorf("ListContainers: %v", err)
		return nil, nil
	}
	sbs, err := h.cri.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{Filter: &cri.PodSandboxFilter{LabelSelector: sel}})
	if err != nil {
		h.t.Errorf("ListPodSandbox: %v", err)
		return nil, nil
	}
	return cs.Containers, sbs.Items
}

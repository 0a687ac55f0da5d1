package podruntime

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/internal/containerdtest"
)

// TestPodRunsWithItsDevices: a pod's container gets the device manager's run options (a device
// node, environment, a read-only mount) and its spec's environment, as the probe inside sees.
func TestPodRunsWithItsDevices(t *testing.T) {
	h := newHarness(t)
	out, ro := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked []string
	r, _ := h.start(withRunOptions(func(_ context.Context, pod *v1.Pod, c *v1.Container) (*devicemanager.RunContainerOptions, error) {
		mu.Lock()
		asked = append(asked, pod.Name+"/"+c.Name)
		mu.Unlock()
		return &devicemanager.RunContainerOptions{
			Envs:        []devicemanager.EnvVar{{Name: "KDM_DEVICES", Value: "dev0"}},
			Devices:     []devicemanager.DeviceInfo{{PathOnHost: "/dev/null", PathInContainer: "/dev/kdmtest0", Permissions: "rwm"}},
			Mounts:      []devicemanager.Mount{{ContainerPath: "/ro", HostPath: ro, ReadOnly: true}, {ContainerPath: "/out", HostPath: out}},
			Annotations: []devicemanager.Annotation{{Name: "kdm.test/annotation", Value: "yes"}},
		}, nil
	}))
	pod := h.pod("devices", v1.RestartPolicyAlways,
		h.container("main", "PROBE_OUT", "/out/report", "PROBE_WRITE", "/dev/kdmtest0,/ro/file", "FROM_SPEC", "spec"))
	h.setPods(pod)
	r.Trigger()

	s := waitStatus(t, r, pod.UID, "Running", phaseIs(v1.PodRunning))
	cs := s.ContainerStatuses[0]
	if cs.State.Running == nil || !cs.Ready || !ptr.Deref(cs.Started, false) || cs.RestartCount != 0 ||
		!strings.HasPrefix(cs.ContainerID, "containerd://") || cs.ImageID == "" {
		t.Errorf("container status = %+v, want running, ready, started, restart count 0, a containerd ID and an image ID", cs)
	}
	if s.SandboxID == "" {
		t.Error("no sandbox ID in the status")
	}

	report := containerdtest.WaitProbe(t, filepath.Join(out, "report"), waitTimeout)
	for name, want := range map[string]string{"KDM_DEVICES": "dev0", "FROM_SPEC": "spec"} {
		if got, _ := report.Env(name); got != want {
			t.Errorf("env %s = %q, want %q", name, got, want)
		}
	}
	if d, ok := report.Device("/dev/kdmtest0"); !ok || d.Type != "c" || d.Major != 1 || d.Minor != 3 {
		t.Errorf("device /dev/kdmtest0 = %+v (present %v), want the character device 1:3 (/dev/null)", d, ok)
	}
	if w, ok := report.Write("/dev/kdmtest0"); !ok || !w.OK {
		t.Errorf("write to /dev/kdmtest0 = %+v, want success", w)
	}
	if m, ok := report.Mount("/ro"); !ok || !m.ReadOnly() {
		t.Errorf("mount /ro = %+v (present %v), want read-only", m, ok)
	}
	if w, _ := report.Write("/ro/file"); w.OK {
		t.Error("a write to the read-only mount succeeded")
	}

	ctrs, _ := h.runtimeHolds(pod.UID)
	if len(ctrs) != 1 {
		t.Fatalf("runtime holds %d containers of the pod, want 1", len(ctrs))
	}
	for k, want := range map[string]string{LabelPodName: "devices", LabelPodNamespace: "default", LabelContainerName: "main", LabelManaged: "true"} {
		if got := ctrs[0].Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if got := ctrs[0].Annotations["kdm.test/annotation"]; got != "yes" {
		t.Errorf("annotation from the run options = %q, want yes", got)
	}
	if _, err := os.Stat(filepath.Join(h.logs, "default_devices_uid-devices", "main", "0.log")); err != nil {
		t.Errorf("container log: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(asked, []string{"devices/main"}) {
		t.Errorf("RunOptions asked for %v, want once for devices/main", asked)
	}
}

// TestInitContainersInOrder: regular init containers run one at a time to completion, a sidecar
// starts after them and stays, then the app container starts.
func TestInitContainersInOrder(t *testing.T) {
	h := newHarness(t)
	r, _ := h.start()
	pod := h.pod("init", v1.RestartPolicyAlways, h.container("app"))
	pod.Spec.InitContainers = []v1.Container{
		// init1 runs a while, so that a start of init2 before its end would show.
		h.container("init1", "PROBE_EXIT", "0", "PROBE_EXIT_AFTER", "1s"),
		h.container("init2", "PROBE_EXIT", "0"),
		h.container("sidecar"),
	}
	pod.Spec.InitContainers[2].RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	h.setPods(pod)
	r.Trigger()

	s := waitStatus(t, r, pod.UID, "Running with its app started", func(s PodStatus) bool {
		return s.Phase == v1.PodRunning && s.ContainerStatuses[0].State.Running != nil
	})
	init1, init2, side := s.InitContainerStatuses[0], s.InitContainerStatuses[1], s.InitContainerStatuses[2]
	for _, cs := range []*v1.ContainerStatus{&init1, &init2} {
		if term := cs.State.Terminated; term == nil || term.ExitCode != 0 || cs.RestartCount != 0 {
			t.Fatalf("init container %s = %+v, want terminated with exit 0 and no restart", cs.Name, cs.State)
		}
	}
	if side.State.Running == nil || side.RestartCount != 0 || !side.Ready {
		t.Fatalf("sidecar = %+v, want running and ready, not restarted", side)
	}
	app := s.ContainerStatuses[0]
	if t2 := init2.State.Terminated.StartedAt.Time; t2.Before(init1.State.Terminated.FinishedAt.Time) {
		t.Errorf("init2 started at %v, before init1 finished at %v", t2, init1.State.Terminated.FinishedAt)
	}
	finished := init2.State.Terminated.FinishedAt.Time
	if st := side.State.Running.StartedAt.Time; st.Before(finished) {
		t.Errorf("the sidecar started at %v, before init2 finished at %v", st, finished)
	}
	if st := app.State.Running.StartedAt.Time; st.Before(side.State.Running.StartedAt.Time) {
		t.Errorf("the app started at %v, before the sidecar at %v", st, side.State.Running.StartedAt)
	}
}

// TestNeverRestartFails: a container that exits 3 in a restartPolicy Never pod is not restarted
// and the pod fails.
func TestNeverRestartFails(t *testing.T) {
	h := newHarness(t)
	r, _ := h.start()
	pod := h.pod("never", v1.RestartPolicyNever, h.container("main", "PROBE_EXIT", "3"))
	h.setPods(pod)
	r.Trigger()
	s := waitStatus(t, r, pod.UID, "Failed", phaseIs(v1.PodFailed))
	cs := s.ContainerStatuses[0]
	if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 3 || cs.RestartCount != 0 {
		t.Fatalf("container = %+v (restarts %d), want terminated with exit code 3, not restarted", cs.State, cs.RestartCount)
	}
	if ctrs, _ := h.runtimeHolds(pod.UID); len(ctrs) != 1 {
		t.Errorf("runtime holds %d containers of the pod, want the one that failed", len(ctrs))
	}
}

// TestOnFailureSucceeds: a container that exits 0 in a restartPolicy OnFailure pod is not
// restarted and the pod succeeds.
func TestOnFailureSucceeds(t *testing.T) {
	h := newHarness(t)
	r, _ := h.start()
	pod := h.pod("onfailure", v1.RestartPolicyOnFailure, h.container("main", "PROBE_EXIT", "0"))
	h.setPods(pod)
	r.Trigger()
	s := waitStatus(t, r, pod.UID, "Succeeded", phaseIs(v1.PodSucceeded))
	if cs := s.ContainerStatuses[0]; cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 ||
		cs.State.Terminated.Reason != "Completed" || cs.RestartCount != 0 {
		t.Fatalf("container = %+v (restarts %d), want terminated, Completed, not restarted", cs.State, cs.RestartCount)
	}
}

// TestCrashBackOff: a crashing container restarts at once, then waits out the back-off measured
// on the Runtime's clock.
func TestCrashBackOff(t *testing.T) {
	h := newHarness(t)
	clk := clocktesting.NewFakeClock(time.Now())
	r, _ := h.start(withClock(clk))
	pod := h.pod("crash", v1.RestartPolicyAlways, h.container("main", "PROBE_EXIT", "1"))
	h.setPods(pod)
	r.Trigger()

	backingOff := func(restarts int32) func(PodStatus) bool {
		return func(s PodStatus) bool {
			cs := s.ContainerStatuses[0]
			return cs.RestartCount == restarts && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff"
		}
	}
	s := waitStatus(t, r, pod.UID, "in back-off after one restart", backingOff(1))
	if s.Phase != v1.PodRunning {
		t.Errorf("phase in back-off = %s, want Running", s.Phase)
	}
	if last := s.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 1 {
		t.Errorf("last termination = %+v, want exit code 1", last)
	}
	clk.Step(10 * time.Second)
	waitStatus(t, r, pod.UID, "in back-off after a second restart", backingOff(2))
	// Only the newest exited instance is kept.
	if ctrs, _ := h.runtimeHolds(pod.UID); len(ctrs) > 2 {
		t.Errorf("runtime holds %d containers of the pod, want at most 2 (the newest and its predecessor)", len(ctrs))
	}
}

// TestRemovalStopsBeforeOnStopped: a pod no longer listed has its containers and sandbox removed
// before OnStopped is called.
func TestRemovalStopsBeforeOnStopped(t *testing.T) {
	h := newHarness(t)
	type held struct{ containers, sandboxes int }
	atStop := make(chan held, 1)
	h.onStopped = func(uid types.UID) {
		cs, sbs := h.runtimeHolds(uid)
		atStop <- held{len(cs), len(sbs)}
	}
	r, _ := h.start()
	pod := h.pod("removed", v1.RestartPolicyAlways, h.container("main"))
	pod.Spec.InitContainers = []v1.Container{h.container("sidecar")}
	pod.Spec.InitContainers[0].RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	h.setPods(pod)
	r.Trigger()
	waitStatus(t, r, pod.UID, "Running", phaseIs(v1.PodRunning))

	h.setPods()
	r.Trigger()
	select {
	case got := <-atStop:
		if got.containers != 0 || got.sandboxes != 0 {
			t.Errorf("at OnStopped the runtime still held %d containers and %d sandboxes of the pod", got.containers, got.sandboxes)
		}
	case <-time.After(waitTimeout):
		t.Fatal("OnStopped not called")
	}
	if _, ok := r.Status(pod.UID); ok {
		t.Error("a removed pod still has a status")
	}
	if got := h.stoppedUIDs(); !slices.Equal(got, []types.UID{pod.UID}) {
		t.Errorf("OnStopped calls = %v, want once for %s", got, pod.UID)
	}
}

// TestStopPodOfAPodNeverHeld: StopPod of a pod the runtime holds nothing of (never listed, or
// removed before a Runtime ran) is answered with OnStopped, so its devices are not held for
// ever; a StopPod of a pod still listed stops nothing.
func TestStopPodOfAPodNeverHeld(t *testing.T) {
	h := newHarness(t)
	r, _ := h.start()
	kept := h.pod("kept", v1.RestartPolicyAlways, h.container("main"))
	h.setPods(kept)
	r.Trigger()
	waitStatus(t, r, kept.UID, "Running", phaseIs(v1.PodRunning))

	r.StopPod("never-held")
	r.StopPod(kept.UID) // still listed: ignored
	deadline := time.Now().Add(waitTimeout)
	for !slices.Contains(h.stoppedUIDs(), types.UID("never-held")) {
		if time.Now().After(deadline) {
			t.Fatal("no OnStopped for a StopPod of a pod the runtime never held")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := h.stoppedUIDs(); !slices.Equal(got, []types.UID{"never-held"}) {
		t.Errorf("OnStopped calls = %v, want only never-held", got)
	}
	if s, ok := r.Status(kept.UID); !ok || s.Phase != v1.PodRunning {
		t.Errorf("the listed pod after a StopPod of it: %+v (has a status: %v); want it left running", s, ok)
	}
}

// TestRestartAdoptsAndRemovesOrphans: a new Runtime on the same containerd adopts a listed
// pod's running container without restarting it, and removes a pod no longer listed.
func TestRestartAdoptsAndRemovesOrphans(t *testing.T) {
	h := newHarness(t)
	r1, stop1 := h.start()
	kept := h.pod("kept", v1.RestartPolicyAlways, h.container("main"))
	orphan := h.pod("orphan", v1.RestartPolicyAlways, h.container("main"))
	h.setPods(kept, orphan)
	r1.Trigger()
	before := waitStatus(t, r1, kept.UID, "Running", phaseIs(v1.PodRunning))
	waitStatus(t, r1, orphan.UID, "Running", phaseIs(v1.PodRunning))
	stop1()

	h.setPods(kept)
	r2, _ := h.start()
	after := waitStatus(t, r2, kept.UID, "Running", phaseIs(v1.PodRunning))
	b, a := before.ContainerStatuses[0], after.ContainerStatuses[0]
	if a.ContainerID != b.ContainerID || a.RestartCount != 0 || after.SandboxID != before.SandboxID ||
		!a.State.Running.StartedAt.Equal(&b.State.Running.StartedAt) {
		t.Errorf("after the restart: container %s (restarts %d, started %v) in sandbox %s; want the adopted %s (started %v) in %s",
			a.ContainerID, a.RestartCount, a.State.Running.StartedAt, after.SandboxID, b.ContainerID, b.State.Running.StartedAt, before.SandboxID)
	}

	deadline := time.Now().Add(waitTimeout)
	for !slices.Contains(h.stoppedUIDs(), orphan.UID) {
		if time.Now().After(deadline) {
			t.Fatalf("the orphan was not removed; OnStopped calls: %v", h.stoppedUIDs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if cs, sbs := h.runtimeHolds(orphan.UID); len(cs)+len(sbs) != 0 {
		t.Errorf("runtime still holds %d containers and %d sandboxes of the orphan", len(cs), len(sbs))
	}
	if got := h.stoppedUIDs(); slices.Contains(got, kept.UID) {
		t.Errorf("OnStopped called for the kept pod: %v", got)
	}
}

// TestRestartFinishesHalfStartedPod: a Runtime stopped while a pod's second container was being
// prepared leaves the pod half started; the next Runtime creates the missing container and keeps
// the running one.
func TestRestartFinishesHalfStartedPod(t *testing.T) {
	h := newHarness(t)
	blocked := make(chan struct{})
	r1, stop1 := h.start(withRunOptions(func(ctx context.Context, _ *v1.Pod, c *v1.Container) (*devicemanager.RunContainerOptions, error) {
		if c.Name == "second" {
			close(blocked)
			<-ctx.Done() // the Runtime stops here
			return nil, ctx.Err()
		}
		return nil, nil
	}))
	pod := h.pod("half", v1.RestartPolicyAlways, h.container("first"), h.container("second"))
	h.setPods(pod)
	r1.Trigger()
	select {
	case <-blocked:
	case <-time.After(waitTimeout):
		t.Fatal("the second container's run options were never asked for")
	}
	stop1()
	ctrs, _ := h.runtimeHolds(pod.UID)
	if len(ctrs) != 1 || ctrs[0].Metadata.Name != "first" {
		t.Fatalf("after the stop the runtime holds %d containers, want only first", len(ctrs))
	}
	firstID := ctrs[0].Id

	r2, _ := h.start()
	s := waitStatus(t, r2, pod.UID, "Running with both containers", func(s PodStatus) bool {
		return s.Phase == v1.PodRunning && s.ContainerStatuses[0].State.Running != nil && s.ContainerStatuses[1].State.Running != nil
	})
	if got := s.ContainerStatuses[0]; got.ContainerID != "containerd://"+firstID || got.RestartCount != 0 {
		t.Errorf("first = %s (restarts %d), want the adopted containerd://%s, not restarted", got.ContainerID, got.RestartCount, firstID)
	}
}

// TestImagePulledOnlyWhenAbsent: an image the runtime lacks is pulled, and a pull that fails
// leaves the container waiting with ErrImagePull; an image it holds is used as it is. Every
// other test shows the second half: their probe image exists nowhere but in this containerd,
// so a pull of it would fail and the container would never start.
func TestImagePulledOnlyWhenAbsent(t *testing.T) {
	h := newHarness(t)
	r, _ := h.start()
	absent := h.pod("absent", v1.RestartPolicyAlways, v1.Container{Name: "main", Image: "kdm.test/absent:1"})
	present := h.pod("present", v1.RestartPolicyAlways, h.container("main"))
	h.setPods(absent, present)
	r.Trigger()
	waitStatus(t, r, present.UID, "the pod of a present image Running", phaseIs(v1.PodRunning))
	s := waitStatus(t, r, absent.UID, "the pod of an absent image waiting on its pull", func(s PodStatus) bool {
		return len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].State.Waiting != nil &&
			s.ContainerStatuses[0].State.Waiting.Reason == reasonErrImagePull
	})
	if msg := s.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "PullImage kdm.test/absent:1") {
		t.Errorf("ErrImagePull message %q; want it to name the pull of kdm.test/absent:1", msg)
	}
	if s.Phase != v1.PodPending {
		t.Errorf("phase %s; want Pending while the image cannot be pulled", s.Phase)
	}
}

package podruntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Waiting reasons, the kubelet's.
const (
	reasonContainerCreating = "ContainerCreating"
	reasonPodInitializing   = "PodInitializing"
	reasonCrashLoopBackOff  = "CrashLoopBackOff"
	reasonErrImagePull      = "ErrImagePull"
	reasonConfigError       = "CreateContainerConfigError"
	reasonCreateError       = "CreateContainerError"
	reasonRunError          = "RunContainerError"
)

// podRecord is what the runtime holds of one pod.
type podRecord struct {
	sandboxes  []*cri.PodSandbox
	containers []*cri.Container
}

// waitReason is why a container that should run does not: the last failed step, kept until a
// step succeeds.
type waitReason struct{ reason, message string }

// syncAll relists the runtime, removes the pods no longer listed and syncs the listed ones.
func (r *Runtime) syncAll(ctx context.Context, rt runtimeClients) {
	r.reapKills()
	pods := r.cfg.Pods()
	listed := make(map[types.UID]*v1.Pod, len(pods))
	for _, p := range pods {
		listed[p.UID] = p
	}

	records, err := r.list(ctx, rt)
	if err != nil {
		r.log.Error(err, "Listing the container runtime's pods failed; retrying at the next sync")
		return
	}

	// Removals first: their devices may be what a listed pod waits for. Each removed pod is
	// stopped by a goroutine of its own (kill.go), so pods removed together stop together,
	// each with its own grace period, and no pod's stop waits for another's.
	var gone []types.UID
	for uid := range records {
		if listed[uid] == nil {
			gone = append(gone, uid)
		}
	}
	for uid := range r.known {
		if listed[uid] == nil && records[uid] == nil {
			gone = append(gone, uid)
		}
	}
	for uid := range r.takeStopRequests() {
		if listed[uid] == nil && records[uid] == nil && r.known[uid] == nil {
			gone = append(gone, uid) // holds nothing: stopped already
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i] < gone[j] })
	for _, uid := range gone {
		r.startKill(ctx, rt, uid, r.known[uid], records[uid])
	}

	seen := make(map[string]bool)
	for _, pod := range pods {
		if r.killing[pod.UID] {
			// Listed again while its old containers stop: it is synced once they are gone.
			continue
		}
		r.known[pod.UID] = pod
		rec := records[pod.UID]
		if rec == nil {
			rec = &podRecord{}
		}
		for _, c := range rec.containers {
			seen[c.Id] = true
		}
		st := r.syncPod(ctx, rt, pod, rec)
		r.mu.Lock()
		old, had := r.statuses[pod.UID]
		r.statuses[pod.UID] = st
		r.mu.Unlock()
		if (!had || !apiequality.Semantic.DeepEqual(old, st)) && r.cfg.OnStatus != nil {
			r.cfg.OnStatus(pod.UID, st)
		}
	}
	for id := range r.cstatus {
		if !seen[id] {
			delete(r.cstatus, id)
			delete(r.exitSeen, id)
		}
	}
}

// list returns the runtime's kdm-managed sandboxes and containers by pod UID.
func (r *Runtime) list(ctx context.Context, rt runtimeClients) (map[types.UID]*podRecord, error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	sbs, err := rt.rt.ListPodSandbox(cctx, &cri.ListPodSandboxRequest{Filter: &cri.PodSandboxFilter{LabelSelector: managedFilter}})
	if err != nil {
		return nil, fmt.Errorf("ListPodSandbox: %w", err)
	}
	cs, err := rt.rt.ListContainers(cctx, &cri.ListContainersRequest{Filter: &cri.ContainerFilter{LabelSelector: managedFilter}})
	if err != nil {
		return nil, fmt.Errorf("ListContainers: %w", err)
	}
	records := make(map[types.UID]*podRecord)
	rec := func(labels map[string]string) *podRecord {
		uid := types.UID(labels[LabelPodUID])
		if records[uid] == nil {
			records[uid] = &podRecord{}
		}
		return records[uid]
	}
	for _, sb := range sbs.Items {
		rec(sb.Labels).sandboxes = append(rec(sb.Labels).sandboxes, sb)
	}
	for _, c := range cs.Containers {
		rec(c.Labels).containers = append(rec(c.Labels).containers, c)
	}
	return records, nil
}

// killPod stops and removes every container, then every sandbox, of the pod. pod is nil for an
// orphan. NotFound counts as done. It touches no state of Run's loop: the goroutine stopping a
// removed pod calls it (kill.go).
func (r *Runtime) killPod(ctx context.Context, rt runtimeClients, uid types.UID, pod *v1.Pod, rec *podRecord) error {
	if rec == nil {
		return nil
	}
	log := klog.LoggerWithValues(r.log, "podUID", uid)
	if err := r.stopContainers(ctx, rt, pod, rec.containers); err != nil {
		return err
	}
	var errs []error
	for _, c := range rec.containers {
		if err := r.removeContainerRPC(ctx, rt, c.Id); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, sb := range rec.sandboxes {
		if err := r.removeSandbox(ctx, rt, sb.Id); err != nil {
			errs = append(errs, err)
			continue
		}
		log.V(2).Info("Removed pod sandbox", "podSandboxID", sb.Id)
	}
	return errors.Join(errs...)
}

// stopContainers stops the containers that are not exited, in parallel, each with its grace
// period.
func (r *Runtime) stopContainers(ctx context.Context, rt runtimeClients, pod *v1.Pod, cs []*cri.Container) error {
	var wg sync.WaitGroup
	errs := make([]error, len(cs))
	for i, c := range cs {
		if c.State == cri.ContainerState_CONTAINER_EXITED {
			continue
		}
		grace := r.containerGracePeriod(c)
		if pod != nil {
			grace = r.gracePeriod(pod)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.stopContainer(ctx, rt, c, grace)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *Runtime) stopContainer(ctx context.Context, rt runtimeClients, c *cri.Container, grace time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, grace+r.cfg.RPCTimeout)
	defer cancel()
	_, err := rt.rt.StopContainer(cctx, &cri.StopContainerRequest{ContainerId: c.Id, Timeout: int64(grace / time.Second)})
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("StopContainer %s (%s): %w", c.Id, c.GetMetadata().GetName(), err)
	}
	r.log.V(2).Info("Stopped container", "containerID", c.Id, "containerName", c.GetMetadata().GetName(),
		"podUID", c.Labels[LabelPodUID], "gracePeriod", grace)
	return nil
}

// removeContainer removes a container and forgets what Run's loop knew of it. Called from Run's
// goroutine.
func (r *Runtime) removeContainer(ctx context.Context, rt runtimeClients, id string) error {
	if err := r.removeContainerRPC(ctx, rt, id); err != nil {
		return err
	}
	delete(r.cstatus, id)
	delete(r.exitSeen, id)
	return nil
}

// removeContainerRPC removes a container. It touches no state of Run's loop, so the goroutine
// stopping a removed pod calls it (the loop drops the removed containers' cached statuses at
// its next sync, since no listed pod has them).
func (r *Runtime) removeContainerRPC(ctx context.Context, rt runtimeClients, id string) error {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	if _, err := rt.rt.RemoveContainer(cctx, &cri.RemoveContainerRequest{ContainerId: id}); err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("RemoveContainer %s: %w", id, err)
	}
	return nil
}

func (r *Runtime) removeSandbox(ctx context.Context, rt runtimeClients, id string) error {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	if _, err := rt.rt.StopPodSandbox(cctx, &cri.StopPodSandboxRequest{PodSandboxId: id}); err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("StopPodSandbox %s: %w", id, err)
	}
	if _, err := rt.rt.RemovePodSandbox(cctx, &cri.RemovePodSandboxRequest{PodSandboxId: id}); err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("RemovePodSandbox %s: %w", id, err)
	}
	return nil
}

// forget drops the in-memory state of a removed pod.
func (r *Runtime) forget(uid types.UID) {
	for k := range r.backoff {
		if k.uid == uid {
			delete(r.backoff, k)
		}
	}
	for k := range r.waiting {
		if k.uid == uid {
			delete(r.waiting, k)
		}
	}
	delete(r.carried, uid)
}

// ensureImage pulls image when the runtime does not hold it.
func (r *Runtime) ensureImage(ctx context.Context, rt runtimeClients, image string, log klog.Logger) error {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	st, err := rt.img.ImageStatus(cctx, &cri.ImageStatusRequest{Image: &cri.ImageSpec{Image: image}})
	if err != nil {
		return fmt.Errorf("ImageStatus %s: %w", image, err)
	}
	if st.Image != nil {
		return nil
	}
	log.Info("Pulling image", "image", image)
	if _, err := rt.img.PullImage(cctx, &cri.PullImageRequest{Image: &cri.ImageSpec{Image: image}}); err != nil {
		return fmt.Errorf("PullImage %s: %w", image, err)
	}
	return nil
}

// ensureLogDir creates a directory for container logs.
func ensureLogDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating log directory: %w", err)
	}
	return nil
}

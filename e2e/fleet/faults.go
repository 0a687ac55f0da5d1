package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Fault is one injected fault's outcome.
type Fault struct {
	Name string
	// Recovered is how long from the fault's end until every node was Ready again (with a
	// Lease renewed after it) and every pod Running; Settled adds the nothing-lost check.
	Recovered, Settled time.Duration
	// Evicted counts the workload's pods on the failed nodes.
	Evicted int
	// JobsBackingOff counts the Jobs short of pods when the fault settled: the Job controller
	// re-creates a Job's failed (here: evicted) pods only after a delay that starts at 10 s
	// and doubles with each failure since the Job's last success, up to 10 minutes.
	JobsBackingOff int
}

// settleTimeout bounds each wait after a fault.
func (f *Fleet) settleTimeout() time.Duration {
	return 2*time.Minute + time.Duration(len(f.Nodes))*time.Second
}

// recover waits after a fault that ended at end for every node Ready (Lease renewed after end),
// every pod Running and nothing lost, and fills in fault's durations.
func (f *Fleet) recover(ctx context.Context, fault *Fault, end time.Time, before Snapshot) (Snapshot, error) {
	if err := f.WaitNodesReady(ctx, f.Nodes, end); err != nil {
		return nil, fmt.Errorf("%s: %w", fault.Name, err)
	}
	if err := f.waitSettled(ctx, fault); err != nil {
		return nil, fmt.Errorf("%s: %w", fault.Name, err)
	}
	fault.Recovered = time.Since(end)
	snap, err := f.CheckNothingLost(ctx, f.Nodes, before)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fault.Name, err)
	}
	fault.Settled = time.Since(end)
	f.Logf("%s: every node Ready and every pod Running %.1fs after, nothing lost (%.1fs)", fault.Name, fault.Recovered.Seconds(), fault.Settled.Seconds())
	return snap, nil
}

// RestartComponent restarts kubecluster.APIServer or kubecluster.Etcd under the running fleet.
func (f *Fleet) RestartComponent(ctx context.Context, s *Sampler, component string, before Snapshot) (*Fault, Snapshot, error) {
	fault := &Fault{Name: component + " restarted"}
	end := s.Begin(fault.Name)
	err := f.Cluster.Restart(ctx, component)
	end()
	if err != nil {
		return nil, nil, err
	}
	snap, err := f.recover(ctx, fault, time.Now(), before)
	return fault, snap, err
}

// KillNodes SIGKILLs a tenth of the nodes (at least one; never the isolated one), waits until
// the node lifecycle controller marks them not ready and their pods are evicted and replaced
// on the others, then boots them again: they must free the evicted pods' GPUs.
func (f *Fleet) KillNodes(ctx context.Context, s *Sampler, before Snapshot) (*Fault, Snapshot, error) {
	k := max(1, len(f.Nodes)/10)
	victims := f.Nodes[:k]
	fault := &Fault{Name: fmt.Sprintf("%d of %d nodes killed", k, len(f.Nodes))}
	end := s.Begin(fault.Name)
	onVictims := map[string]bool{}
	dead := map[string]bool{}
	for _, n := range victims {
		n.Kill()
		dead[n.Name] = true
	}
	for _, p := range f.Pods() {
		if dead[p.Spec.NodeName] {
			onVictims[p.Namespace+"/"+p.Name] = true
		}
	}
	fault.Evicted = len(onVictims)
	f.Logf("%s holding %d pods; waiting for NotReady and eviction", fault.Name, len(onVictims))
	err := f.poll(ctx, "killed nodes NotReady", f.settleTimeout(), func() (bool, string, error) {
		notReady := 0
		for _, n := range victims {
			node, err := f.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err == nil && !nodeReady(node) {
				notReady++
			}
		}
		return notReady == k, fmt.Sprintf("%d of %d NotReady", notReady, k), nil
	})
	if err == nil {
		err = f.waitEvicted(ctx, onVictims)
	}
	if err == nil {
		// The evicted pods are replaced on the live nodes; they stay Terminating until their
		// node confirms.
		_, err = f.WaitAllRunning(ctx, time.Now(), f.settleTimeout(), false)
	}
	if err != nil {
		end()
		return nil, nil, fmt.Errorf("%s: %w", fault.Name, err)
	}
	for _, n := range victims {
		if err := n.Start(); err != nil {
			end()
			return nil, nil, errors.Join(fmt.Errorf("%s: booting %s again", fault.Name, n.Name), err)
		}
	}
	end()
	snap, err := f.recover(ctx, fault, time.Now(), before)
	return fault, snap, err
}

// CutNode takes the isolated node off the network for d, checks meanwhile that it keeps its
// pods' GPUs, and reconnects it.
func (f *Fleet) CutNode(ctx context.Context, s *Sampler, d time.Duration, before Snapshot) (*Fault, Snapshot, error) {
	n := f.Nodes[len(f.Nodes)-1]
	if n.net == nil {
		return nil, nil, errors.New("fleet: no isolated node (Options.IsolateNode)")
	}
	fault := &Fault{Name: fmt.Sprintf("%s cut off for %s", n.Name, d)}
	for _, p := range f.Pods() {
		if p.Spec.NodeName == n.Name {
			fault.Evicted++
		}
	}
	end := s.Begin(fault.Name)
	if err := n.net.cut(true); err != nil {
		end()
		return nil, nil, err
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	// Cut off, the node keeps every GPU it had given.
	held, err := f.snapshot(ctx, []*Node{n})
	if err == nil {
		err = compare(held, before)
	}
	if err == nil {
		for pod, a := range before {
			if a.Node == n.Name && held[pod].Node != n.Name {
				err = fmt.Errorf("%w: %s lost pod %s's GPUs while cut off", errLost, n.Name, pod)
			}
		}
	}
	if uerr := n.net.cut(false); uerr != nil {
		err = errors.Join(err, uerr)
	}
	end()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", fault.Name, err)
	}
	snap, err := f.recover(ctx, fault, time.Now(), before)
	return fault, snap, err
}

// waitEvicted waits until each of the pods (namespace/name) is being deleted or gone.
func (f *Fleet) waitEvicted(ctx context.Context, pods map[string]bool) error {
	return f.poll(ctx, fmt.Sprintf("%d pods evicted", len(pods)), f.settleTimeout(), func() (bool, string, error) {
		left := 0
		for _, p := range f.Pods() {
			if pods[p.Namespace+"/"+p.Name] && p.DeletionTimestamp == nil {
				left++
			}
		}
		return left == 0, fmt.Sprintf("%d not evicted yet", left), nil
	})
}

// waitSettled waits until every pod of the workload is Running and none is Pending or being
// deleted, every Deployment has all its replicas available, and every Job has all its pods
// active or has failed pods: the Job controller's backoff delays their replacements (counted in
// fault.JobsBackingOff).
func (f *Fleet) waitSettled(ctx context.Context, fault *Fault) error {
	return f.poll(ctx, "the workload settled", f.settleTimeout(), func() (bool, string, error) {
		for _, p := range f.Pods() {
			if p.Status.Phase != v1.PodRunning || p.DeletionTimestamp != nil {
				return false, describe(p), nil
			}
		}
		ds, err := f.Admin.AppsV1().Deployments(Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, d := range ds.Items {
			if d.Status.AvailableReplicas != *d.Spec.Replicas || d.Status.Replicas != *d.Spec.Replicas {
				return false, fmt.Sprintf("Deployment %s: %d of %d available", d.Name, d.Status.AvailableReplicas, *d.Spec.Replicas), nil
			}
		}
		js, err := f.Admin.BatchV1().Jobs(Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		fault.JobsBackingOff = 0
		for _, j := range js.Items {
			if j.Status.Active == *j.Spec.Parallelism {
				continue
			}
			if j.Status.Failed == 0 || ptr.Deref(j.Status.Terminating, 0) > 0 {
				return false, fmt.Sprintf("Job %s: %d of %d active", j.Name, j.Status.Active, *j.Spec.Parallelism), nil
			}
			fault.JobsBackingOff++
		}
		return true, "", nil
	})
}

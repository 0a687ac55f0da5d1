package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Snapshot is where every admitted pod's GPUs are: namespace/name → node and sorted GPU IDs,
// from each node's podresources.
type Snapshot map[string]Assignment

// Assignment is one pod's node and GPUs.
type Assignment struct {
	Node string
	GPUs []string
}

// errLost marks a check failure that waiting cannot mend: a device on two pods, a pod on two
// nodes, a pod whose devices changed.
var errLost = errors.New("nothing-lost check")

// CheckNothingLost waits (up to two minutes) until the API and the live nodes agree, and
// fails at once if a device is held by two pods, a pod is admitted on two nodes, or a pod of
// before holds other GPUs or sits on another node now. Agreement is: every Running pod of the
// workload on a live node holds exactly one GPU there, and every node holds GPUs only for
// Running pods bound to it (those of evicted or deleted pods are freed). It returns the new
// snapshot.
func (f *Fleet) CheckNothingLost(ctx context.Context, live []*Node, before Snapshot) (Snapshot, error) {
	var snap Snapshot
	err := f.poll(ctx, "API and nodes to agree on every pod's GPUs", 2*time.Minute, func() (bool, string, error) {
		var err error
		snap, err = f.snapshot(ctx, live)
		if err != nil {
			if errors.Is(err, errLost) {
				return false, "", err
			}
			return false, err.Error(), nil
		}
		if err := compare(before, snap); err != nil {
			return false, "", err
		}
		problems := agree(f.Pods(), live, snap)
		return len(problems) == 0, fmt.Sprintf("%d disagreements, e.g. %s", len(problems), strings.Join(problems[:min(3, len(problems))], "; ")), nil
	})
	return snap, err
}

// snapshot reads every live node's podresources.
func (f *Fleet) snapshot(ctx context.Context, live []*Node) (Snapshot, error) {
	snap := Snapshot{}
	for _, n := range live {
		held, err := n.PodResources(ctx)
		if err != nil {
			return nil, err
		}
		owner := map[string]string{}
		for pod, ids := range held {
			if prev, ok := snap[pod]; ok {
				return nil, fmt.Errorf("%w: pod %s admitted on %s and on %s", errLost, pod, prev.Node, n.Name)
			}
			for _, id := range ids {
				if other, ok := owner[id]; ok {
					return nil, fmt.Errorf("%w: %s: GPU %s held by %s and by %s", errLost, n.Name, id, other, pod)
				}
				owner[id] = pod
			}
			snap[pod] = Assignment{Node: n.Name, GPUs: slices.Sorted(slices.Values(ids))}
		}
	}
	return snap, nil
}

// compare fails for a pod of before that now sits on another node or holds other GPUs.
func compare(before, now Snapshot) error {
	for pod, was := range before {
		is, ok := now[pod]
		if ok && (is.Node != was.Node || !slices.Equal(is.GPUs, was.GPUs)) {
			return fmt.Errorf("%w: pod %s held %v on %s, now %v on %s", errLost, pod, was.GPUs, was.Node, is.GPUs, is.Node)
		}
	}
	return nil
}

// agree lists where the API's pods and the live nodes' assignments differ.
func agree(pods []*v1.Pod, live []*Node, snap Snapshot) []string {
	isLive := map[string]bool{}
	for _, n := range live {
		isLive[n.Name] = true
	}
	var problems []string
	running := map[string]bool{}
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		if p.Status.Phase != v1.PodRunning || p.DeletionTimestamp != nil || !isLive[p.Spec.NodeName] {
			continue
		}
		running[key] = true
		a, ok := snap[key]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s Running on %s holds no GPU there", key, p.Spec.NodeName))
		case a.Node != p.Spec.NodeName || len(a.GPUs) != 1:
			problems = append(problems, fmt.Sprintf("%s Running on %s holds %v on %s", key, p.Spec.NodeName, a.GPUs, a.Node))
		}
	}
	for key, a := range snap {
		if !running[key] {
			problems = append(problems, fmt.Sprintf("%s holds %v on %s but is not Running there", key, a.GPUs, a.Node))
		}
	}
	slices.Sort(problems)
	return problems
}

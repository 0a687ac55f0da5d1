package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/kdm-project/kdm/e2e/kubecluster"
)

// The kubelet's defaults a node's steady request rate is held to. Its configuration defaults
// (pkg/kubelet/apis/config/v1beta1/defaults.go of k8s.io/kubernetes v1.37.2) set
// nodeStatusUpdateFrequency to 10 s and nodeStatusReportFrequency to 5 minutes; its node
// status loop (pkg/kubelet/kubelet_node_status.go) reads the Node from its informer's cache,
// not from the apiserver, and patches the status only when it changed or the report frequency
// passed; its Lease controller (k8s.io/component-helpers/apimachinery/lease) renews every
// 10 s with one update built from the Lease it last wrote, reading it only when it has none.
const (
	KubeletLeaseRenewalsPerMinute = 6.0
	KubeletStatusPatchesPerMinute = 0.2
	// KubeletRequestsPerMinute is their sum: what one kubelet costs the apiserver at steady
	// state, besides its watches (its pods, its Node, and more).
	KubeletRequestsPerMinute = KubeletLeaseRenewalsPerMinute + KubeletStatusPatchesPerMinute
)

// MaxPods is the most single-GPU pods a fleet of n nodes runs (none without nodes): with allFaults, all but the
// GPUs of the larger of the killed tenth of the nodes and the node that is cut off, so that
// their pods fit on the others.
func MaxPods(n int, allFaults bool) int {
	if n < 1 {
		return 0
	}
	total, killed := 0, 0
	for i := range n {
		total += GPUsOf(i)
		if i < max(1, n/10) {
			killed += GPUsOf(i)
		}
	}
	if !allFaults {
		return total
	}
	return total - max(killed, GPUsOf(n-1))
}

// RunConfig is one fleet run.
type RunConfig struct {
	Options
	// Pods is the workload's size; SteadyWindow how long the steady state is measured.
	Pods         int
	SteadyWindow time.Duration
	// AllFaults adds to the apiserver restart: an etcd restart, a tenth of the nodes killed
	// past the node-monitor grace period and (with Options.IsolateNode) the last node cut off
	// for CutFor.
	AllFaults bool
	CutFor    time.Duration
}

// Result is what a run measured.
type Result struct {
	Nodes, GPUs, Pods int
	// AllRunning is how long from the workload's creation until every pod was Running.
	AllRunning time.Duration
	Steady     *Steady
	Faults     []*Fault
	Samples    []Sample
	Marks      []Mark
	// NodeRate is the nodes' requests per second over the run, from the audit log.
	NodeRate []point
	// Skipped names the faults this run could not inject, and why.
	Skipped []string
	// LoadBefore is the machine's load average before the run (LoadAverage).
	LoadBefore string
	// Version is the control plane's Kubernetes version.
	Version string
}

// Run starts a fleet, creates the workload, measures the steady state, injects the faults
// with a nothing-lost check after each, and stops the fleet.
func Run(ctx context.Context, cfg RunConfig) (res *Result, err error) {
	f, err := Start(ctx, cfg.Options)
	if err != nil {
		return nil, err
	}
	defer f.Stop()
	defer func() {
		if err != nil && f.factory != nil {
			err = fmt.Errorf("%w\nworkload: %s", err, f.workloadState(context.Background()))
		}
		if err != nil {
			for _, n := range f.Nodes {
				if n.KDMPID() != 0 {
					err = fmt.Errorf("%w\n--- %s kdm log tail ---\n%s", err, n.Name, n.Log(3000))
					break
				}
			}
		}
	}()
	res = &Result{Nodes: len(f.Nodes), GPUs: f.GPUs(), Pods: cfg.Pods, Version: kubecluster.KubernetesVersion}
	if limit := MaxPods(len(f.Nodes), cfg.AllFaults); cfg.Pods > limit || cfg.Pods < 1 {
		return nil, fmt.Errorf("fleet: %d pods: want 1 to %d for %d nodes (with every fault, the pods of the failed nodes must fit on the others)", cfg.Pods, limit, len(f.Nodes))
	}
	created := time.Now()
	if err := f.CreateWorkload(ctx, cfg.Pods); err != nil {
		return nil, err
	}
	s := f.StartSampler(ctx)
	result := res
	defer func() { result.Samples, result.Marks = s.Stop() }()
	if res.AllRunning, err = f.WaitAllRunning(ctx, created, f.settleTimeout()+time.Duration(cfg.Pods)*100*time.Millisecond, true); err != nil {
		return nil, err
	}
	f.Logf("%d pods Running %.1fs after they were created", cfg.Pods, res.AllRunning.Seconds())
	snap, err := f.CheckNothingLost(ctx, f.Nodes, nil)
	if err != nil {
		return nil, err
	}
	// Let the admissions' events and status writes drain before the steady window.
	time.Sleep(10 * time.Second)
	end := s.Begin("steady window")
	res.Steady, err = f.MeasureSteady(ctx, cfg.SteadyWindow)
	end()
	if err != nil {
		return nil, err
	}
	f.Logf("steady: %.1f requests per node per minute (busiest node %.1f; the kubelet's defaults: %.1f)",
		res.Steady.PerNode.Total(), res.Steady.MaxNode, KubeletRequestsPerMinute)
	steps := []func() (*Fault, Snapshot, error){
		func() (*Fault, Snapshot, error) { return f.RestartComponent(ctx, s, kubecluster.APIServer, snap) },
	}
	if cfg.AllFaults {
		steps = append(steps,
			func() (*Fault, Snapshot, error) { return f.RestartComponent(ctx, s, kubecluster.Etcd, snap) },
			func() (*Fault, Snapshot, error) { return f.KillNodes(ctx, s, snap) })
		if cfg.IsolateNode {
			steps = append(steps, func() (*Fault, Snapshot, error) { return f.CutNode(ctx, s, cfg.CutFor, snap) })
		} else {
			res.Skipped = append(res.Skipped, "a node cut off from the apiserver (it needs its own network namespace: run as root)")
		}
	}
	for _, step := range steps {
		fault, next, err := step()
		if err != nil {
			return nil, err
		}
		res.Faults = append(res.Faults, fault)
		snap = next
		time.Sleep(5 * time.Second) // a gap on the timeline between faults
	}
	res.NodeRate, err = nodeRequestRate(f.Cluster.AuditLogPath(), s.t0, time.Now())
	return res, err
}

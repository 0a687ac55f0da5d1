package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/kdm-project/kdm/e2e/kubecluster"
)

// The kubelet's defaults a node's steady request rate is held to (pkg/kubelet/apis/config/
// v1beta1/defaults.go and the node lease controller of k8s.io/component-helpers): every
// nodeStatusUpdateFrequency (10 s) the kubelet reads its Node and renews its Lease with one
// update from the Lease it last wrote, and it patches the Node's status only when the status
// changed or nodeStatusReportFrequency (5 min) passed.
const (
	KubeletNodeReadsPerMinute     = 6.0
	KubeletLeaseRenewalsPerMinute = 6.0
	KubeletStatusPatchesPerMinute = 0.2
	// KubeletRequestsPerMinute is their sum: what one kubelet costs the apiserver at steady
	// state, besides its watches.
	KubeletRequestsPerMinute = KubeletNodeReadsPerMinute + KubeletLeaseRenewalsPerMinute + KubeletStatusPatchesPerMinute
)

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
		if err != nil {
			for _, n := range f.Nodes {
				if n.KDMPID() != 0 {
					err = fmt.Errorf("%w\n--- %s kdm log tail ---\n%s", err, n.Name, n.Log(3000))
					break
				}
			}
		}
	}()
	res = &Result{Nodes: len(f.Nodes), GPUs: f.GPUs(), Pods: cfg.Pods}
	if cfg.Pods > res.GPUs {
		return nil, fmt.Errorf("fleet: %d pods do not fit on %d GPUs", cfg.Pods, res.GPUs)
	}
	created := time.Now()
	if err := f.CreateWorkload(ctx, cfg.Pods); err != nil {
		return nil, err
	}
	s := f.StartSampler(ctx)
	defer func() { res.Samples, res.Marks = s.Stop() }()
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
	return res, nil
}

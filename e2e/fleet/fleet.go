package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kdm-project/kdm/e2e/kubecluster"
	"github.com/kdm-project/kdm/internal/testbin"
)

// GPUResource is the resource the nodes' plugins advertise.
const GPUResource = "nvidia.com/gpu"

// Options describe a fleet.
type Options struct {
	// Nodes is how many kdm nodes join; at least one.
	Nodes int
	// KubeBins are the control plane's binaries (kubecluster.Build).
	KubeBins kubecluster.Binaries
	// KDM and Plugin are the paths of the kdm and kdm-nvml-plugin binaries (BuildBinaries).
	KDM, Plugin string
	// Dir holds the cluster's and every node's files. It must exist.
	Dir string
	// NodeMonitorGracePeriod is the controller-manager's; zero: kubecluster's default.
	NodeMonitorGracePeriod time.Duration
	// IsolateNode starts the last node in its own network namespace behind a veth pair, so
	// that CutNode can take it off the network (needs root and ip(8)).
	IsolateNode bool
	// Log receives progress lines; nil: none.
	Log io.Writer
}

var everything = labels.Everything()

// GPUsOf is how many mock GPUs node i has: 8, 12 and 16 in turn, 12 on average.
func GPUsOf(i int) int { return []int{8, 12, 16}[i%3] }

// Controllers are the controller-manager's: Deployments, Jobs, the nodes' health and
// taint-based eviction, and the collection of pods of deleted nodes.
var Controllers = []string{"deployment-controller", "replicaset-controller", "job-controller",
	"node-lifecycle-controller", "taint-eviction-controller", "pod-garbage-collector-controller"}

// Fleet is a running control plane and its nodes. Its methods are not safe for concurrent
// use, except where stated.
type Fleet struct {
	opts    Options
	Cluster *kubecluster.Cluster
	Admin   kubernetes.Interface
	Nodes   []*Node
	start   time.Time

	// The workload, once created.
	wantPods  int
	factory   informers.SharedInformerFactory
	podLister corelisters.PodLister
	stopWatch context.CancelFunc
	// baseWatches are the apiserver's open watches before any node joined.
	baseWatches float64

	logMu sync.Mutex
}

// Start starts the control plane once and every node, and waits until every Node is Ready
// with its GPUs allocatable. On error everything started is stopped.
func Start(ctx context.Context, opts Options) (_ *Fleet, err error) {
	if opts.Nodes < 1 {
		return nil, fmt.Errorf("fleet: Nodes must be at least 1, got %d", opts.Nodes)
	}
	f := &Fleet{opts: opts, start: time.Now()}
	defer func() {
		if err != nil {
			f.Stop()
		}
	}()
	names := make([]string, opts.Nodes)
	for i := range names {
		names[i] = fmt.Sprintf("kdm-%03d", i)
	}
	f.Cluster, err = kubecluster.Start(ctx, kubecluster.Options{Binaries: opts.KubeBins, Dir: opts.Dir, Nodes: names,
		ControlPlane: true, Controllers: Controllers, NodeMonitorGracePeriod: opts.NodeMonitorGracePeriod, AuditLog: true})
	if err != nil {
		return nil, err
	}
	if f.Admin, err = f.Cluster.Client(kubecluster.AdminUser); err != nil {
		return nil, err
	}
	m, err := f.scrape(ctx)
	if err != nil {
		return nil, err
	}
	f.baseWatches = m.watches
	f.Logf("control plane %s ready", kubecluster.KubernetesVersion)
	for i, name := range names {
		n, err := newNode(f, i, name, opts.IsolateNode && i == len(names)-1)
		if err != nil {
			return nil, err
		}
		f.Nodes = append(f.Nodes, n)
		if err := n.Start(); err != nil {
			return nil, err
		}
	}
	if err := f.WaitNodesReady(ctx, f.Nodes, time.Time{}); err != nil {
		return nil, err
	}
	f.Logf("%d nodes Ready with %d GPUs", len(f.Nodes), f.GPUs())
	return f, nil
}

// Logf writes a progress line, stamped with the time since Start. Safe for concurrent use.
func (f *Fleet) Logf(format string, args ...any) {
	if f.opts.Log == nil {
		return
	}
	f.logMu.Lock()
	defer f.logMu.Unlock()
	fmt.Fprintf(f.opts.Log, "fleet %7.1fs  %s\n", time.Since(f.start).Seconds(), fmt.Sprintf(format, args...))
}

// GPUs is the fleet's total GPU count.
func (f *Fleet) GPUs() int {
	total := 0
	for _, n := range f.Nodes {
		total += n.GPUs
	}
	return total
}

// Stop kills every node and stops the control plane.
func (f *Fleet) Stop() {
	if f.stopWatch != nil {
		f.stopWatch()
		f.factory.Shutdown()
	}
	var wg sync.WaitGroup
	for _, n := range f.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.Kill()
			n.Close()
		}()
	}
	wg.Wait()
	if f.Cluster != nil {
		f.Cluster.Stop()
	}
}

// WaitNodesReady waits until each of the nodes is Ready, publishes its GPUs as capacity and
// allocatable, and (when since is not zero) has renewed its Lease after since: it has
// reconnected. The wait is bounded by two minutes plus a second per node: a node whose link
// came back may first wait out TCP's retransmission backoff and client-go's HTTP/2 health
// check (a ping after 30 s without a frame, given up after 15 s more).
func (f *Fleet) WaitNodesReady(ctx context.Context, nodes []*Node, since time.Time) error {
	want := map[string]*Node{}
	for _, n := range nodes {
		want[n.Name] = n
	}
	return f.poll(ctx, fmt.Sprintf("%d nodes Ready", len(nodes)), 2*time.Minute+time.Duration(len(nodes))*time.Second, func() (bool, string, error) {
		list, err := f.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		ready := 0
		last := ""
		for i := range list.Items {
			node := &list.Items[i]
			n := want[node.Name]
			if n == nil {
				continue
			}
			c, a := node.Status.Capacity[GPUResource], node.Status.Allocatable[GPUResource]
			ok := nodeReady(node) && c.Value() == int64(n.GPUs) && a.Value() == int64(n.GPUs)
			if ok && !since.IsZero() {
				lease, err := f.Admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, node.Name, metav1.GetOptions{})
				ok = err == nil && lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(since)
			}
			if ok {
				ready++
			} else {
				last = fmt.Sprintf("%s: ready %v gpu %s/%s", node.Name, nodeReady(node), a.String(), c.String())
			}
		}
		return ready == len(nodes), fmt.Sprintf("%d of %d ready; %s", ready, len(nodes), last), nil
	})
}

func nodeReady(node *v1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// poll checks cond every half second until it holds, fails, ctx ends or timeout passes; the
// timeout error names what was waited for and cond's last state.
func (f *Fleet) poll(ctx context.Context, what string, timeout time.Duration, cond func() (bool, string, error)) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		last = state
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s; last: %s", timeout, what, last)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), fmt.Errorf("waiting for %s; last: %s", what, last))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Binaries are the built kdm and kdm-nvml-plugin, in Dir, which the caller removes.
type Binaries struct {
	Dir, KDM, Plugin string
}

// BuildBinaries builds kdm and kdm-nvml-plugin of the module whose root is moduleRoot (relative
// to the working directory, or absolute) into a new temporary directory.
func BuildBinaries(moduleRoot string) (Binaries, error) {
	pkg := func(c string) string {
		p := filepath.ToSlash(filepath.Join(moduleRoot, "cmd", c))
		if !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "../") {
			p = "./" + p // a path, not an import path
		}
		return p
	}
	dir, err := testbin.Build("kdm-fleet-bin", map[string]string{"kdm": pkg("kdm"), "kdm-nvml-plugin": pkg("kdm-nvml-plugin")})
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{Dir: dir, KDM: filepath.Join(dir, "kdm"), Plugin: filepath.Join(dir, "kdm-nvml-plugin")}, nil
}

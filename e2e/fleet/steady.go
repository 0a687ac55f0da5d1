package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kdm-project/kdm/e2e/kubecluster"
)

// Steady is what the fleet cost over a steady window, every rate per minute.
type Steady struct {
	Window time.Duration
	Nodes  int
	// PerNode is the requests per node per minute made with the nodes' own identities
	// (system:node:<name>), from the apiserver's audit log, by verb and resource; MaxNode is the
	// busiest node's total.
	PerNode Counts
	MaxNode float64
	// ByNode is each node's requests per minute by verb and resource.
	ByNode map[string]Counts
	// Metric is apiserver_request_total's rise per minute by verb and resource, every client
	// (the nodes, the scheduler, the controller-manager and the fleet's own scrapes); Audit is
	// the audit log's count for every identity, the cross-check.
	Metric, Audit Counts
	// AuditByUser is the audit log's requests per minute by identity, the nodes together.
	AuditByUser Counts
	// WatchesPerNode are the watches open per node at the window's end by resource, from the
	// audit log (started and not ended); Watches is apiserver_longrunning_requests{verb=
	// "WATCH"}'s rise since before any node joined (every client, the fleet's own watch too).
	WatchesPerNode Counts
	Watches        float64
	// KDM is per kdm process: CPU (cores, average and busiest) and RSS (bytes, average and
	// largest) at the window's end.
	KDMCPU, KDMCPUMax, KDMRSS, KDMRSSMax float64
	// KDMPrivate is the average kdm's resident memory no other process shares, in bytes.
	KDMPrivate float64
	// APIServer and Etcd: CPU in cores and RSS in bytes at the window's end.
	APIServerCPU, APIServerRSS, EtcdCPU, EtcdRSS float64
	// Load is the machine's one-minute load average at the window's end.
	Load string
}

// MeasureSteady measures a window of the given length in which nothing is injected.
func (f *Fleet) MeasureSteady(ctx context.Context, window time.Duration) (*Steady, error) {
	auditPath := f.Cluster.AuditLogPath()
	_, _, off, err := auditCounts(auditPath, 0)
	if err != nil {
		return nil, err
	}
	m0, err := f.scrape(ctx)
	if err != nil {
		return nil, err
	}
	p0, err := f.procs()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(window):
	}
	m1, err := f.scrape(ctx)
	if err != nil {
		return nil, err
	}
	p1, err := f.procs()
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(t0)
	byUser, _, _, err := auditCounts(auditPath, off)
	if err != nil {
		return nil, err
	}
	_, open, _, err := auditCounts(auditPath, 0)
	if err != nil {
		return nil, err
	}
	perMin := 1 / elapsed.Minutes()
	st := &Steady{Window: elapsed, Nodes: len(f.Nodes), PerNode: Counts{}, Audit: Counts{}, Metric: Counts{},
		ByNode: map[string]Counts{}, WatchesPerNode: Counts{}, AuditByUser: Counts{}}
	for k, v := range m1.requests.minus(m0.requests) {
		st.Metric[k] = v * perMin
	}
	for user, counts := range byUser {
		node := strings.HasPrefix(user, "system:node:")
		who := user
		if node {
			who = "the nodes"
		}
		st.AuditByUser[who] += counts.Total() * perMin
		for k, v := range counts {
			st.Audit[k] += v * perMin
			if node {
				st.PerNode[k] += v * perMin / float64(len(f.Nodes))
			}
		}
		if node {
			st.MaxNode = max(st.MaxNode, counts.Total()*perMin)
			st.ByNode[user] = Counts{}
			for k, v := range counts {
				st.ByNode[user][k] = v * perMin
			}
		}
	}
	for user, counts := range open {
		if strings.HasPrefix(user, "system:node:") {
			for k, v := range counts {
				st.WatchesPerNode[k] += v / float64(len(f.Nodes))
			}
		}
	}
	st.Watches = m1.watches - f.baseWatches
	secs := elapsed.Seconds()
	for _, n := range f.Nodes {
		a, b := p0[n.Name], p1[n.Name]
		cpu := (b.cpu - a.cpu) / secs
		st.KDMCPU += cpu / float64(len(f.Nodes))
		st.KDMCPUMax = max(st.KDMCPUMax, cpu)
		st.KDMRSS += b.rss / float64(len(f.Nodes))
		st.KDMRSSMax = max(st.KDMRSSMax, b.rss)
		st.KDMPrivate += b.private / float64(len(f.Nodes))
	}
	st.APIServerCPU = (p1[kubecluster.APIServer].cpu - p0[kubecluster.APIServer].cpu) / secs
	st.APIServerRSS = p1[kubecluster.APIServer].rss
	st.EtcdCPU = (p1[kubecluster.Etcd].cpu - p0[kubecluster.Etcd].cpu) / secs
	st.EtcdRSS = p1[kubecluster.Etcd].rss
	st.Load = LoadAverage()
	return st, nil
}

// procs reads /proc for every node's kdm, the apiserver and etcd.
func (f *Fleet) procs() (map[string]procStat, error) {
	out := map[string]procStat{}
	for _, n := range f.Nodes {
		pid := n.KDMPID()
		if pid == 0 {
			return nil, fmt.Errorf("%s: kdm is not running", n.Name)
		}
		st, err := readProc(pid)
		if err != nil {
			return nil, err
		}
		out[n.Name] = st
	}
	for _, c := range []string{kubecluster.APIServer, kubecluster.Etcd} {
		pid, err := f.Cluster.PID(c)
		if err != nil {
			return nil, err
		}
		if out[c], err = readProc(pid); err != nil {
			return nil, err
		}
	}
	return out, nil
}

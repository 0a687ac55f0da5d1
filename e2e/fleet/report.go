package fleet

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The generated part of docs/fleet.md lies between these lines; WriteReport replaces it.
const (
	beginMarker = "<!-- BEGIN make fleet: generated, do not edit -->"
	endMarker   = "<!-- END make fleet -->"
)

// WriteReport writes fleet-pods.svg and fleet-requests.svg into dir and replaces the
// generated section of dir/fleet.md with res's figures. Each file is written whole (a
// temporary file renamed), and fleet.md must hold both markers.
func WriteReport(res *Result, dir string) error {
	mdPath := filepath.Join(dir, "fleet.md")
	md, err := os.ReadFile(mdPath)
	if err != nil {
		return err
	}
	i, j := bytes.Index(md, []byte(beginMarker)), bytes.Index(md, []byte(endMarker))
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q … %q section to replace", mdPath, beginMarker, endMarker)
	}
	for name, chart := range map[string]func(*bytes.Buffer) error{
		"fleet-pods.svg": func(b *bytes.Buffer) error {
			return renderChart(b, fmt.Sprintf("Pods Running, %d kdm nodes", res.Nodes), "pods Running", runningSeries(res.Samples), res.Marks)
		},
		"fleet-node-requests.svg": func(b *bytes.Buffer) error {
			return renderChart(b, fmt.Sprintf("requests per second of the %d kdm nodes together", res.Nodes),
				"requests per second by the nodes' identities (audit log)", res.NodeRate, res.Marks)
		},
		"fleet-requests.svg": func(b *bytes.Buffer) error {
			return renderChart(b, fmt.Sprintf("apiserver requests per second, %d kdm nodes", res.Nodes),
				"apiserver_request_total per second, every client", requestRate(res.Samples), res.Marks)
		},
	} {
		var b bytes.Buffer
		if err := chart(&b); err != nil {
			return err
		}
		if err := writeWhole(filepath.Join(dir, name), b.Bytes()); err != nil {
			return err
		}
	}
	var out bytes.Buffer
	out.Write(md[:i+len(beginMarker)])
	out.WriteString("\n" + Figures(res))
	out.Write(md[j:])
	return writeWhole(mdPath, out.Bytes())
}

func writeWhole(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil { //nolint:gosec // documentation
		return err
	}
	return os.Rename(tmp, path)
}

// Figures is the generated Markdown of a run.
func Figures(res *Result) string {
	var b strings.Builder
	st := res.Steady
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("Run of %s UTC: %d kdm nodes (%d mock GPUs: 8, 12 and 16 per node in turn), %d single-GPU pods, Kubernetes %s; load average %s before the run, %s at the end of the steady window (2 cores).\n\n",
		time.Now().UTC().Format("2006-01-02 15:04"), res.Nodes, res.GPUs, res.Pods, res.Version, res.LoadBefore, st.Load)
	p("**All %d pods Running %.1f s** after the Deployments and Jobs were created.\n\n", res.Pods, res.AllRunning.Seconds())
	p("![pods Running over time](fleet-pods.svg)\n\n![the nodes' requests per second over time](fleet-node-requests.svg)\n\n![apiserver requests per second over time, every client](fleet-requests.svg)\n\n")
	p("Steady window: %.0f s. Requests per node per minute, from the audit log (each node's own identity, system:node:&lt;name&gt;), beside a kubelet with its defaults:\n\n", st.Window.Seconds())
	p("| request | kdm, per node per minute | kubelet defaults |\n|---|---:|---:|\n")
	kubelet := map[string]float64{"UPDATE leases": KubeletLeaseRenewalsPerMinute, "PATCH nodes/status": KubeletStatusPatchesPerMinute}
	keys := st.PerNode.Keys()
	for k := range kubelet {
		if _, ok := st.PerNode[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		p("| %s | %.2f | %.1f |\n", k, st.PerNode[k], kubelet[k])
	}
	p("| **total** | **%.2f** (busiest node %.2f) | **%.1f** |\n\n", st.PerNode.Total(), st.MaxNode, KubeletRequestsPerMinute)
	p("Watches open per node (audit log): %s; apiserver_longrunning_requests{verb=\"WATCH\"} rose by %.0f over the run (%.2f per node; every client, the fleet's own pod watch too).\n\n",
		countsText(st.WatchesPerNode, "%.2f"), st.Watches, st.Watches/float64(res.Nodes))
	p("apiserver_request_total rose by %.0f per minute in the window, every client; largest: %s. The audit log counted %.0f per minute, by identity: %s.\n\n",
		st.Metric.Total(), top(st.Metric, 5), st.Audit.Total(), countsText(st.AuditByUser, "%.0f"))
	mib := func(v float64) float64 { return v / (1 << 20) }
	p("| process | CPU (millicores) | RSS (MiB) |\n|---|---:|---:|\n")
	p("| kdm, per node (average / busiest) | %.1f / %.1f | %.1f / %.1f (%.1f of it its own, the rest the binary's pages every kdm shares) |\n",
		1000*st.KDMCPU, 1000*st.KDMCPUMax, mib(st.KDMRSS), mib(st.KDMRSSMax), mib(st.KDMPrivate))
	p("| kube-apiserver (all / per node) | %.0f / %.1f | %.0f / %.1f |\n", 1000*st.APIServerCPU, 1000*st.APIServerCPU/float64(res.Nodes), mib(st.APIServerRSS), mib(st.APIServerRSS)/float64(res.Nodes))
	p("| etcd (all / per node) | %.0f / %.1f | %.0f / %.1f |\n\n", 1000*st.EtcdCPU, 1000*st.EtcdCPU/float64(res.Nodes), mib(st.EtcdRSS), mib(st.EtcdRSS)/float64(res.Nodes))
	p("| fault | pods on the failed nodes | every node Ready, every pod Running after | nothing lost checked after | Jobs in the Job controller's backoff then |\n|---|---:|---:|---:|---:|\n")
	for _, f := range res.Faults {
		p("| %s | %d | %.1f s | %.1f s | %d |\n", f.Name, f.Evicted, f.Recovered.Seconds(), f.Settled.Seconds(), f.JobsBackingOff)
	}
	for _, sk := range res.Skipped {
		p("| not run: %s | | | | |\n", sk)
	}
	p("\nThe nodes' requests per second: %.1f at most in a second of the steady window, %s.\n", peakIn(res.NodeRate, res.Marks, "steady window", 0), faultPeaks(res))
	p("\n")
	return b.String()
}

func countsText(c Counts, format string) string {
	var parts []string
	for _, k := range c.Keys() {
		if c[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s "+format, k, c[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// top names the n largest counts.
func top(c Counts, n int) string {
	keys := c.Keys()
	sort.SliceStable(keys, func(i, j int) bool { return c[keys[i]] > c[keys[j]] })
	var parts []string
	for _, k := range keys[:min(n, len(keys))] {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, c[k]))
	}
	return strings.Join(parts, ", ")
}

// peakIn is the largest value of pts within the named mark, extended by after.
func peakIn(pts []point, marks []Mark, name string, after time.Duration) float64 {
	peak := 0.0
	for _, m := range marks {
		if m.Name != name {
			continue
		}
		for _, p := range pts {
			if p.at >= m.Start && (m.End < 0 || p.at <= m.End+after) {
				peak = max(peak, p.v)
			}
		}
	}
	return peak
}

// faultPeaks names each fault's peak of the nodes' requests per second, from its start to 30 s
// after its end.
func faultPeaks(res *Result) string {
	var parts []string
	for _, f := range res.Faults {
		peak := peakIn(res.NodeRate, res.Marks, f.Name, 30*time.Second)
		parts = append(parts, fmt.Sprintf("%.0f (%.2f per node) around %s", peak, peak/float64(res.Nodes), f.Name))
	}
	return strings.Join(parts, ", ")
}

package fleet

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kdm-project/kdm/e2e/kubecluster"
)

// TestFleet joins five kdm nodes (8, 12 and 16 mock GPUs) to a real control plane, runs 40
// GPU pods from Deployments and Jobs through the real scheduler, checks that at steady state
// no node asks the apiserver more often than a kubelet with its defaults does, and that after
// an apiserver restart every node is Ready again and every pod keeps its GPUs. make fleet runs
// the whole story with a hundred nodes and every fault.
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and five kdm nodes; run by make test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bins, err := kubecluster.Build(ctx, filepath.Join("..", "..", "test", "kubebins"), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	built, err := BuildBinaries(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(built.Dir) })
	res, err := Run(ctx, RunConfig{
		Options: Options{Nodes: 5, KubeBins: bins, KDM: built.KDM, Plugin: built.Plugin, Dir: t.TempDir(), Log: testWriter{t}},
		Pods:    40, SteadyWindow: 40 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Steady
	for _, k := range st.PerNode.Keys() {
		t.Logf("per node per minute: %-28s %5.1f", k, st.PerNode[k])
	}
	// Over a window, a kubelet with its defaults renews its Lease once per 10 s, reads its Node
	// from a watch and patches its status on change or every 5 minutes: per node, no more
	// Lease requests than renewals fit in the window (one more at its edges), and at most one
	// Node request (the periodic status patch).
	renewals := KubeletLeaseRenewalsPerMinute*st.Window.Minutes() + 1
	for node, c := range st.ByNode {
		leases := c["GET leases"] + c["UPDATE leases"] + c["CREATE leases"]
		nodes := c["GET nodes"] + c["PATCH nodes/status"] + c["PATCH nodes"]
		if leases*st.Window.Minutes() > renewals || nodes*st.Window.Minutes() > 1 || c.Total()*st.Window.Minutes() > renewals+1 {
			t.Errorf("%s made %s requests per minute over %s; a kubelet with its defaults makes at most %.0f Lease and 1 Node request in that window",
				node, countsText(c, "%.1f"), st.Window.Round(time.Second), renewals)
		}
	}
	if len(st.ByNode) != 5 {
		t.Errorf("requests of %d nodes in the audit log, want 5", len(st.ByNode))
	}
	if w := st.WatchesPerNode.Total(); w < 1 || w > 2 {
		t.Errorf("%v watches per node, want the pods' and at most one more", st.WatchesPerNode)
	}
	if len(res.Faults) != 1 || res.Faults[0].Name != kubecluster.APIServer+" restarted" {
		t.Fatalf("faults %+v, want the apiserver restart", res.Faults)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

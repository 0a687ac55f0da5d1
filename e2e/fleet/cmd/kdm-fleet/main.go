// Command kdm-fleet runs `make fleet`: a fleet of kdm nodes on a real control plane, its
// workload and faults (package e2e/fleet), and writes the figures and pictures of
// docs/fleet.md.
//
//	kdm-fleet [--nodes 100] [--pods 10×nodes] [--steady 60s] [--cut 60s] [--out docs]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kdm-project/kdm/e2e/fleet"
	"github.com/kdm-project/kdm/e2e/kubecluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kdm-fleet:", err)
		os.Exit(1)
	}
}

func run() error {
	nodes := flag.Int("nodes", 100, "kdm nodes")
	pods := flag.Int("pods", 0, "GPU pods of the workload (0: ten per node, fewer where the failed nodes' pods would not fit on the others)")
	steady := flag.Duration("steady", time.Minute, "length of the steady window")
	cut := flag.Duration("cut", time.Minute, "how long one node is cut off from the apiserver")
	out := flag.String("out", "docs", "directory of fleet.md, whose generated section is replaced, and of the SVGs (fleet-*.svg)")
	root := flag.String("module", ".", "the kdm module's root")
	flag.Parse()
	if *nodes < 1 || *pods < 0 || *steady <= 0 || *cut <= 0 {
		return fmt.Errorf("--nodes must be at least 1 (got %d), --pods not negative (got %d), --steady and --cut positive (got %s and %s)",
			*nodes, *pods, *steady, *cut)
	}
	if *pods == 0 {
		*pods = min(10**nodes, fleet.MaxPods(*nodes, true))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Hour)
	defer cancel()
	bins, err := kubecluster.Build(ctx, filepath.Join(*root, "test", "kubebins"), os.Stderr)
	if err != nil {
		return err
	}
	built, err := fleet.BuildBinaries(*root)
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(built.Dir) }()
	clusterDir, err := os.MkdirTemp("", "kdm-fleet")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(clusterDir) }()
	load := fleet.LoadAverage()
	res, err := fleet.Run(ctx, fleet.RunConfig{
		Options: fleet.Options{Nodes: *nodes, KubeBins: bins, KDM: built.KDM, Plugin: built.Plugin, Dir: clusterDir,
			IsolateNode: os.Geteuid() == 0, Log: os.Stderr},
		Pods: *pods, SteadyWindow: *steady, AllFaults: true, CutFor: *cut,
	})
	if err != nil {
		return err
	}
	res.LoadBefore = load
	return fleet.WriteReport(res, *out)
}

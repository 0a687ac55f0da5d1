// Command kubebins builds the test cluster's kube-apiserver, kube-scheduler,
// kube-controller-manager and etcd from test/kubebins, or
// finds them in the cache, and prints their paths. `make kubebins` runs it before the tests so
// that a cold build is paid once, up front, rather than inside a test's timeout.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/kdm-project/kdm/e2e/kubecluster"
)

func main() {
	module := flag.String("module", "test/kubebins", "directory of the nested module to build")
	flag.Parse()
	start := time.Now()
	bins, err := kubecluster.Build(context.Background(), *module, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubebins: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("kube-apiserver %s\nkube-scheduler %s\nkube-controller-manager %s\netcd %s\n(%s)\n",
		bins.APIServer, bins.Scheduler, bins.ControllerManager, bins.Etcd, time.Since(start).Round(time.Millisecond))
}

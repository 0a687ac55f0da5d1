// Command policynames prints the policy names kdm accepts, one a line, in the order of
// devicemanager.PolicyNames (every kubelet minor oldest first, then kdm), so that the Makefile
// and scripts derive their lists from the table in devicemanager/kubelets.go instead of
// naming the minors again. With -kubelets it prints only the kubelet rows, each as its policy
// name and the upstream release it is checked against, separated by a space.
//
//	go run ./internal/policynames            # kubelet-… lines, then kdm
//	go run ./internal/policynames -kubelets  # "kubelet-… v…" lines
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/kdm-project/kdm/devicemanager"
)

func main() {
	kubelets := flag.Bool("kubelets", false, "print only the kubelet minors, each with its upstream release")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "policynames: no arguments expected, got %q\n", flag.Args())
		os.Exit(2)
	}
	if err := write(os.Stdout, *kubelets); err != nil {
		fmt.Fprintln(os.Stderr, "policynames:", err)
		os.Exit(1)
	}
}

// write prints the policy names, or with kubelets the kubelet rows, to w.
func write(w io.Writer, kubelets bool) error {
	if kubelets {
		for _, v := range devicemanager.KubeletVersions() {
			if _, err := fmt.Fprintln(w, v.Name, v.Reference); err != nil {
				return err
			}
		}
		return nil
	}
	for _, name := range devicemanager.PolicyNames() {
		if _, err := fmt.Fprintln(w, name); err != nil {
			return err
		}
	}
	return nil
}

// Command etcd is the etcd server of the project's test cluster, built from
// go.etcd.io/etcd/server/v3 at the version kube-apiserver pins.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }

//go:build olderkubelet

// Package olderkubelet runs the upstreambench benchmarks (package suite) on the device
// manager of a kubelet release older than the one the parent module pins: its adapter
// (NewKubeletManager and the suite.Side around it) and its benchmark list, written once for
// every such release.
//
// Go holds one version of a module in a build list, so each older release needs a module of
// its own that pins it: test/upstreambench/kubelet-<minor>, a go.mod, a go.sum and a doc.go
// that imports this package (so that `go mod tidy` keeps its requirements). That module is
// the build list this package is compiled in: cmd/benchcompare runs
//
//	go test -c -tags olderkubelet github.com/kdm-project/kdm/test/upstreambench/olderkubelet
//
// in it. The build tag keeps the package out of the parent module's own builds, whose newer
// kubelet has another Go API. The code here compiles against every release from v1.35 to
// v1.36, whose devicemanager, topologymanager and cadvisor APIs the adapter uses are the
// same; a release whose API differs gets its own adapter files under a tag of their own.
package olderkubelet

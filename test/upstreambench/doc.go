// Package upstreambench runs the kubelet's own device manager (k8s.io/kubernetes, the newest
// release of devicemanager.KubeletVersions, pkg/kubelet/cm/devicemanager) and kdm through the same benchmarks: the same operations
// under the same names, on the same data, against the same plugin (the kubelet's own
// device-plugin stub, serving identical Allocate responses over real unix sockets). The
// benchmarks themselves are package suite; package olderkubelet, built in the nested module
// kubelet-<minor> of each older release, runs them on that kubelet.
//
// Every benchmark has a /kubelet-<minor> and a /kdm sub-benchmark (and, where a kdm policy
// changes the work, one sub-benchmark per policy), so that one run of the test binary
// alternates between the two implementations; cmd/benchcompare runs this binary and
// the older releases' in rounds and prints a table per kubelet. The package holds no product code:
// it exists to be measured.
//
// The kubelet's exported constructor, devicemanager.NewManagerImpl, always serves
// /var/lib/kubelet/device-plugins/kubelet.sock. The package reaches the unexported
// constructor underneath it, which takes the socket path, through go:linkname (see
// kubelet_constructor.go): the kubelet's code runs unchanged, in a temporary directory.
package upstreambench

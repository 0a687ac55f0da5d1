// Package suite is the body of the upstreambench benchmarks: the data, the plugin, the wait
// and every operation measured, written once for any number of device managers. It imports
// only code that is the same in every kubelet release it is built against (the kubelet's
// device-plugin stub and checkpoint package, the API types) and nothing of kdm, so that a
// module pinning an older k8s.io/kubernetes (test/upstreambench/kubelet-<minor>, through package
// olderkubelet) builds it too.
//
// A caller supplies the managers as Sides: each module's tests wrap its kubelet's manager
// (whose methods change between releases) and, in the module that builds kdm, kdm's. The
// benchmark functions run one sub-benchmark per Side under the same names in every module,
// so that cmd/benchcompare can put the kubelet releases and kdm side by side.
package suite

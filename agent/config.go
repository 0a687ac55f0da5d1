package agent

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/kdm-project/kdm/agent/internal/kubeapi"
	"github.com/kdm-project/kdm/agent/nodestatus"
	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/endpoint"
)

// Defaults follow the kubelet's.
const (
	DefaultRootDir            = "/var/lib/kubelet"
	DefaultHealthzBindAddress = "127.0.0.1:10248"
	// DefaultResyncPeriod bounds how stale the pod source may get if a file event is missed.
	DefaultResyncPeriod = 10 * time.Second
	// DefaultNodeStatusUpdateFrequency is the node status publisher's default, the kubelet's
	// --node-status-update-frequency.
	DefaultNodeStatusUpdateFrequency = nodestatus.DefaultUpdateFrequency
	// DefaultSandboxImage is the pod sandbox image with a container runtime, the kubelet's.
	DefaultSandboxImage = "registry.k8s.io/pause:3.10.1"
)

// Config describes an Agent. Every field's zero value is usable and documented; New applies
// the defaults and then Validate, which rejects bad values instead of correcting them.
type Config struct {
	// RootDir holds pod-resources/kubelet.sock, kdm/pods/ (admission results) and, if set,
	// plugins_registry/. Zero: /var/lib/kubelet.
	RootDir string
	// DevicePluginDir holds kubelet.sock and the checkpoint. Zero:
	// /var/lib/kubelet/device-plugins (like the kubelet, it does not follow RootDir).
	DevicePluginDir string
	// PodResultsDir is where one JSON result per pod is written. Zero: <RootDir>/kdm/pods, a
	// directory of kdm's own beside a kubelet's <RootDir>/pods. Results an earlier version
	// left in <RootDir>/pods are moved here once, at start.
	PodResultsDir string
	// PodManifestPath is a directory of pod manifests (YAML or JSON, one pod per file), watched
	// like the kubelet's static pod path. Zero: no manifest source.
	PodManifestPath string
	// HealthzBindAddress serves /healthz, /livez, /readyz, /metrics and /status. Zero
	// disables HTTP.
	HealthzBindAddress string
	// PluginWatcher enables registration through <RootDir>/plugins_registry.
	PluginWatcher bool
	// GracePeriod for stopped plugins; zero means the kubelet's 5 minutes.
	GracePeriod time.Duration
	// Policy selects kubelet-1.36 behaviour (zero) or kdm's improvements.
	Policy devicemanager.Policy
	// Endpoint carries the plugin RPC deadlines.
	Endpoint endpoint.Config
	// ContainerRuntimeEndpoint, if set, is the CRI endpoint of a container runtime
	// ("unix:///run/containerd/containerd.sock", the kubelet's --container-runtime-endpoint):
	// admitted pods then run as containers that receive their devices, and a removed pod's
	// devices are released only once its containers and sandbox are gone. Zero: kdm runs no
	// containers and every view says so.
	ContainerRuntimeEndpoint string
	// SandboxImage is the image of the pods' sandboxes with a container runtime; it must be
	// the runtime's own sandbox image (containerd's sandbox_image), and is pulled only when
	// the runtime lacks it. Zero: DefaultSandboxImage.
	SandboxImage string
	// KubeClient, if set, makes the API server a pod source: pods bound to NodeName are
	// admitted and their outcome written to pod status, and the Node (identity, capacity,
	// device resources) and its Lease are published. Zero: no API server.
	KubeClient kubernetes.Interface
	// NodeName is the node this agent stands for; required with KubeClient.
	NodeName string
	// NodeLabels are set on the Node beside kubernetes.io/arch, kubernetes.io/os and
	// kubernetes.io/hostname (the kubelet's --node-labels). Zero: none.
	NodeLabels map[string]string
	// RegisterWithTaints are the taints of a Node kdm creates (the kubelet's
	// --register-with-taints); an existing Node's taints are left alone. Zero: none.
	RegisterWithTaints []v1.Taint
	// NodeIP is the Node's InternalIP: one address, or an IPv4 and an IPv6 address separated
	// by a comma (dual stack). Zero: the address of the host's default-route interface.
	NodeIP string
	// SystemReserved and KubeReserved (cpu, memory, ephemeral-storage, pid) are subtracted
	// from capacity to give allocatable, as the kubelet does. Zero: nothing reserved.
	SystemReserved, KubeReserved v1.ResourceList
	// CapacityOverride, when set, replaces the host-detected cpu, memory and
	// ephemeral-storage capacity: for hosts where a provider runs the containers elsewhere.
	// Zero: detected from the host.
	CapacityOverride v1.ResourceList
	// NodeCapacity is published on the Node beside the detected capacity and the device
	// resources, and wins over both for the names it lists; the daemon sets pods from
	// --max-pods. Zero: nothing more.
	NodeCapacity v1.ResourceList
	// NodeStatusUpdateFrequency bounds how stale the Node's status gets; zero means
	// DefaultNodeStatusUpdateFrequency. Device changes are published at once.
	NodeStatusUpdateFrequency time.Duration
	// ResyncPeriod re-reads the manifest directory; zero means DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// Clock is read for every timer, ticker and timestamp of the agent. Zero: the real clock.
	Clock clock.Clock
	// Logger and Registry are the agent's logger and metrics registry (zero: klog's
	// background logger, a fresh registry).
	Logger   klog.Logger
	Registry *prometheus.Registry
}

// withDefaults fills the zero values that have a default.
func (c Config) withDefaults() Config {
	if c.RootDir == "" {
		c.RootDir = DefaultRootDir
	}
	if c.DevicePluginDir == "" {
		c.DevicePluginDir = pluginapi.DevicePluginPath
	}
	if c.PodResultsDir == "" {
		c.PodResultsDir = filepath.Join(c.RootDir, "kdm", "pods")
	}
	if c.ResyncPeriod == 0 {
		c.ResyncPeriod = DefaultResyncPeriod
	}
	if c.SandboxImage == "" {
		c.SandboxImage = DefaultSandboxImage
	}
	if c.NodeStatusUpdateFrequency == 0 {
		c.NodeStatusUpdateFrequency = DefaultNodeStatusUpdateFrequency
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	return c
}

// Validate reports every bad value of c, in the order of the fields, joined into one error.
// Zero values are valid; it never changes c.
func (c Config) Validate() error {
	var errs []error
	for _, p := range []struct{ name, path string }{
		{"root dir", c.RootDir}, {"device plugin dir", c.DevicePluginDir},
		{"pod results dir", c.PodResultsDir}, {"pod manifest path", c.PodManifestPath},
	} {
		if p.path != "" && !filepath.IsAbs(p.path) {
			errs = append(errs, fmt.Errorf("%s must be an absolute path: %q", p.name, p.path))
		}
	}
	if c.GracePeriod < 0 {
		errs = append(errs, fmt.Errorf("grace period must not be negative: %v", c.GracePeriod))
	}
	if e := c.ContainerRuntimeEndpoint; e != "" {
		if p, ok := strings.CutPrefix(e, "unix://"); !ok || !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("container runtime endpoint %q: must be unix:// and an absolute socket path", e))
		}
	}
	if c.KubeClient != nil && c.NodeName == "" {
		errs = append(errs, errors.New("a node name is required with a Kubernetes client"))
	}
	if c.NodeName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(c.NodeName) {
			errs = append(errs, fmt.Errorf("node name %q: %s", c.NodeName, msg))
		}
	}
	errs = append(errs, kubeapi.ValidateLabels("node labels", c.NodeLabels)...)
	errs = append(errs, validateNodeLabelDomains(c.NodeLabels)...)
	errs = append(errs, kubeapi.ValidateTaints("register-with-taints", c.RegisterWithTaints)...)
	if _, err := ParseNodeIPs(c.NodeIP); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, kubeapi.ValidateResources("system reserved", c.SystemReserved, reservableResources)...)
	errs = append(errs, kubeapi.ValidateResources("kube reserved", c.KubeReserved, reservableResources)...)
	errs = append(errs, kubeapi.ValidateResources("capacity override", c.CapacityOverride, hostResources)...)
	errs = append(errs, kubeapi.ValidateResources("node capacity", c.NodeCapacity, nil)...)
	if c.NodeStatusUpdateFrequency < 0 {
		errs = append(errs, fmt.Errorf("node status update frequency must not be negative: %v", c.NodeStatusUpdateFrequency))
	}
	if c.ResyncPeriod < 0 {
		errs = append(errs, fmt.Errorf("resync period must not be negative: %v", c.ResyncPeriod))
	}
	return errors.Join(errs...)
}

// Resource names the reservation and override flags take, as the kubelet's.
var (
	hostResources       = []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage}
	reservableResources = append(slices.Clone(hostResources), "pid")
)

// kubeletLabels are the kubernetes.io and k8s.io labels a node may set on itself, and
// kubeletLabelDomains the domains whose labels it may set (NodeRestriction's rules).
var (
	kubeletLabels = []string{
		v1.LabelHostname, v1.LabelOSStable, v1.LabelArchStable, "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
		v1.LabelInstanceTypeStable, v1.LabelInstanceType, v1.LabelTopologyZone, v1.LabelTopologyRegion,
		v1.LabelFailureDomainBetaZone, v1.LabelFailureDomainBetaRegion,
	}
	kubeletLabelDomains = []string{"kubelet.kubernetes.io", "node.kubernetes.io"}
)

// validateNodeLabelDomains refuses kubernetes.io and k8s.io labels that the API server's
// NodeRestriction admission would refuse a node, as the kubelet refuses them at start.
func validateNodeLabelDomains(labels map[string]string) []error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		domain, _, ok := strings.Cut(k, "/")
		if !ok || slices.Contains(kubeletLabels, k) {
			continue
		}
		if !isDomain(domain, "kubernetes.io") && !isDomain(domain, "k8s.io") {
			continue
		}
		if slices.ContainsFunc(kubeletLabelDomains, func(d string) bool { return isDomain(domain, d) }) {
			continue
		}
		errs = append(errs, fmt.Errorf("node labels: %q: a node may not set kubernetes.io or k8s.io labels other than %s, or those under %s",
			k, strings.Join(kubeletLabels, ", "), strings.Join(kubeletLabelDomains, ", ")))
	}
	return errs
}

// isDomain reports whether domain is d or a subdomain of it.
func isDomain(domain, d string) bool { return domain == d || strings.HasSuffix(domain, "."+d) }

// ParseNodeIPs parses a node IP setting: empty, one IP, or an IPv4 and an IPv6 address
// separated by a comma. The unspecified addresses (0.0.0.0, ::) are refused.
func ParseNodeIPs(s string) ([]net.IP, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > 2 {
		return nil, fmt.Errorf("node IP %q: at most two addresses, one IPv4 and one IPv6", s)
	}
	var ips []net.IP
	for _, p := range parts {
		ip := net.ParseIP(strings.TrimSpace(p))
		if ip == nil {
			return nil, fmt.Errorf("node IP %q: %q is not an IP address", s, p)
		}
		if ip.IsUnspecified() {
			return nil, fmt.Errorf("node IP %q: %s is unspecified", s, ip)
		}
		ips = append(ips, ip)
	}
	if len(ips) == 2 && (ips[0].To4() == nil) == (ips[1].To4() == nil) {
		return nil, fmt.Errorf("node IP %q: two addresses must be one IPv4 and one IPv6", s)
	}
	return ips, nil
}

// PodResourcesSocket is where the podresources API is served.
func (c Config) PodResourcesSocket() string {
	return filepath.Join(c.RootDir, "pod-resources", "kubelet.sock")
}

// PodsDir is where admission results are written, one JSON file per pod: PodResultsDir, or
// its default <RootDir>/kdm/pods.
func (c Config) PodsDir() string {
	if c.PodResultsDir != "" {
		return c.PodResultsDir
	}
	root := c.RootDir
	if root == "" {
		root = DefaultRootDir
	}
	return filepath.Join(root, "kdm", "pods")
}

// legacyPodsDir is where earlier versions wrote the results: <RootDir>/pods, a directory
// the kubelet also uses.
func (c Config) legacyPodsDir() string { return filepath.Join(c.RootDir, "pods") }

package main

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent"
	"github.com/kdm-project/kdm/devicemanager"
)

// runOptions are the flags of `kdm run`, parsed but not yet validated against each other. The
// names and syntax follow the kubelet's where the kubelet has the flag.
type runOptions struct {
	rootDir, pluginDir, podResultsDir, manifests string
	healthzAddress                               string
	healthzPort                                  int32
	grace                                        time.Duration
	policy                                       string
	watcher                                      bool
	kubeconfig, nodeName                         string
	runtimeEndpoint, sandboxImage                string
	maxPods                                      int64
	nodeLabels                                   map[string]string
	taints                                       []string
	nodeIP                                       string
	systemReserved, kubeReserved, nodeCapacity   map[string]string
	shutdownTimeout, deferTimeout, allocTimeout  time.Duration
	version                                      versionValue
	logging                                      *logsapi.LoggingConfiguration
}

// defaultHealthzHost and defaultHealthzPort split agent.DefaultHealthzBindAddress into the
// kubelet's two flags.
var defaultHealthzHost, defaultHealthzPort = splitDefaultHealthz(agent.DefaultHealthzBindAddress)

func splitDefaultHealthz(addr string) (string, int32) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 0
	}
	p, _ := strconv.ParseInt(port, 10, 32)
	return host, int32(p)
}

// newRunFlags returns `kdm run`'s flag set writing into a fresh runOptions; pflag's own
// messages go to w.
func newRunFlags(w io.Writer) (*pflag.FlagSet, *runOptions) {
	fs := pflag.NewFlagSet("kdm run", pflag.ContinueOnError)
	fs.SetOutput(w)
	fs.SortFlags = false
	return fs, addRunFlags(fs)
}

// addRunFlags defines `kdm run`'s flags on fs, writing into a fresh runOptions.
func addRunFlags(fs *pflag.FlagSet) *runOptions {
	o := &runOptions{logging: logsapi.NewLoggingConfiguration()}
	fs.StringVar(&o.rootDir, "root-dir", agent.DefaultRootDir, "directory for pod-resources/, kdm/pods/ and plugins_registry/")
	fs.StringVar(&o.pluginDir, "device-plugin-dir", pluginapi.DevicePluginPath, "directory of kubelet.sock, plugin sockets and the checkpoint")
	fs.StringVar(&o.podResultsDir, "pod-results-dir", "", "directory of the per-pod admission results, one JSON file per pod (empty: <root-dir>/kdm/pods)")
	fs.StringVar(&o.manifests, "pod-manifest-path", "", "directory of pod manifests to admit (YAML or JSON)")
	fs.StringVar(&o.healthzAddress, "healthz-bind-address", defaultHealthzHost, "IP address for /healthz, /livez, /readyz, /metrics and /status; a host:port names the port too (empty disables)")
	fs.Int32Var(&o.healthzPort, "healthz-port", defaultHealthzPort, "port of the healthz endpoint (0 disables)")
	fs.DurationVar(&o.grace, "grace-period", devicemanager.DefaultGracePeriod, "how long a resource outlives its stopped plugin")
	fs.StringVar(&o.policy, "policy", devicemanager.DefaultPolicyName(), devicemanager.PolicyHelp())
	fs.BoolVar(&o.watcher, "plugin-watcher", false, "also accept plugins through <root-dir>/plugins_registry")
	fs.StringVar(&o.runtimeEndpoint, "container-runtime-endpoint", "", "CRI endpoint of the container runtime that runs admitted pods, e.g. unix:///run/containerd/containerd.sock (empty: kdm only admits pods and runs no containers)")
	fs.StringVar(&o.sandboxImage, "pod-infra-container-image", agent.DefaultSandboxImage, "with --container-runtime-endpoint: the pod sandbox image, which must be the runtime's own sandbox image; pulled only when absent")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server to join: pods bound to --node-name are admitted and the Node published (empty: no API server)")
	fs.StringVar(&o.nodeName, "node-name", "", "the Node this agent stands for (default: the hostname)")
	fs.Int64Var(&o.maxPods, "max-pods", 110, "with --kubeconfig: the Node's pods capacity, so that a scheduler may place pods on it")
	fs.Var(cliflag.NewMapStringString(&o.nodeLabels), "node-labels", "labels for the Node, key=value pairs separated by ','")
	fs.StringSliceVar(&o.taints, "register-with-taints", nil, "taints of a Node kdm creates, key=value:Effect or key:Effect separated by ','")
	fs.StringVar(&o.nodeIP, "node-ip", "", "the Node's InternalIP, or an IPv4 and an IPv6 address separated by ',' (empty: the default-route interface's)")
	fs.Var(cliflag.NewMapStringString(&o.systemReserved), "system-reserved", "resources reserved for the system, e.g. cpu=200m,memory=500Mi,ephemeral-storage=1Gi,pid=1000")
	fs.Var(cliflag.NewMapStringString(&o.kubeReserved), "kube-reserved", "resources reserved for Kubernetes components, as --system-reserved")
	fs.Var(cliflag.NewMapStringString(&o.nodeCapacity), "node-capacity", "cpu, memory and ephemeral-storage capacity to publish instead of the host's, e.g. cpu=64,memory=256Gi")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "after SIGTERM or SIGINT, how long to wait for a clean stop before exiting with status 1 (0: wait as long as it takes); a second signal exits at once")
	fs.DurationVar(&o.deferTimeout, "defer-admission-timeout", 0, "with --policy kdm: how long an admission waits for a device plugin that has not registered (yet), and how long after start a resource no plugin has registered is waited for (0: 2m)")
	fs.DurationVar(&o.allocTimeout, "allocate-timeout", 0, "deadline for Allocate and GetPreferredAllocation RPCs (0: none under the kubelet policies, 30s/10s under kdm)")
	fs.Var(&o.version, "version", "print version information and exit; --version=raw prints it as JSON")
	fs.Lookup("version").NoOptDefVal = "true"
	logsapi.AddFlags(o.logging, fs)
	// These need the LoggingAlphaOptions feature gate, which kdm has no flag to enable.
	for _, name := range []string{"log-text-split-stream", "log-text-info-buffer-size", "log-json-split-stream", "log-json-info-buffer-size"} {
		if fs.Lookup(name) != nil {
			_ = fs.MarkHidden(name)
		}
	}
	return o
}

// usageError is a bad command line: `kdm run` exits 2 for it, 1 for other failures.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usageErrorf returns a *usageError.
func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// agentConfig checks the options against each other and turns them into the agent's
// configuration, without the Kubernetes client, logger and registry, which the caller adds.
// Values the agent validates itself (labels, taint keys, resource names) are passed through.
func (o *runOptions) agentConfig(fs *pflag.FlagSet) (agent.Config, error) {
	if o.shutdownTimeout < 0 {
		return agent.Config{}, usageErrorf("--shutdown-timeout must not be negative, got %v", o.shutdownTimeout)
	}
	pol, err := devicemanager.ParsePolicy(o.policy)
	if err != nil {
		return agent.Config{}, usageErrorf("--policy: %v", err)
	}
	if o.deferTimeout < 0 {
		return agent.Config{}, usageErrorf("--defer-admission-timeout must not be negative: %v", o.deferTimeout)
	}
	if o.deferTimeout > 0 && pol.DeferAdmission {
		pol.DeferAdmissionTimeout = o.deferTimeout
	}
	if o.allocTimeout < 0 {
		return agent.Config{}, usageErrorf("--allocate-timeout must not be negative: %v", o.allocTimeout)
	}
	if o.allocTimeout > 0 {
		// Otherwise the policy's own deadlines apply: none for the kubelets, 30s/10s for kdm.
		pol.AllocateTimeout, pol.PreferredAllocationTimeout = o.allocTimeout, o.allocTimeout
	}
	healthz, err := healthzAddress(o.healthzAddress, o.healthzPort, fs.Changed("healthz-port"))
	if err != nil {
		return agent.Config{}, err
	}
	taints, err := parseTaints(o.taints)
	if err != nil {
		return agent.Config{}, usageErrorf("--register-with-taints: %v", err)
	}
	cfg := agent.Config{
		RootDir:            o.rootDir,
		DevicePluginDir:    o.pluginDir,
		PodResultsDir:      o.podResultsDir,
		PodManifestPath:    o.manifests,
		HealthzBindAddress: healthz,
		PluginWatcher:      o.watcher,
		GracePeriod:        o.grace,
		Policy:             pol,
		NodeLabels:         o.nodeLabels,
		RegisterWithTaints: taints,
		NodeIP:             o.nodeIP,

		ContainerRuntimeEndpoint: o.runtimeEndpoint,
		SandboxImage:             o.sandboxImage,
	}
	for _, r := range []struct {
		flag string
		in   map[string]string
		out  *v1.ResourceList
	}{
		{"--system-reserved", o.systemReserved, &cfg.SystemReserved},
		{"--kube-reserved", o.kubeReserved, &cfg.KubeReserved},
		{"--node-capacity", o.nodeCapacity, &cfg.CapacityOverride},
	} {
		if *r.out, err = parseResourceList(r.in); err != nil {
			return agent.Config{}, usageErrorf("%s: %v", r.flag, err)
		}
	}
	if o.kubeconfig != "" {
		if o.maxPods < 0 {
			return agent.Config{}, usageErrorf("--max-pods must not be negative: %d", o.maxPods)
		}
		cfg.NodeCapacity = v1.ResourceList{v1.ResourcePods: *resource.NewQuantity(o.maxPods, resource.DecimalSI)}
	}
	return cfg, nil
}

// healthzAddress joins the kubelet's --healthz-bind-address and --healthz-port. An address
// that already carries a port (host:port, the form kdm took before) is used as it is, and then
// --healthz-port must not be given too. An empty address or port 0 disables the endpoint.
func healthzAddress(addr string, port int32, portSet bool) (string, error) {
	if port < 0 || port > 65535 {
		return "", usageErrorf("--healthz-port %d: want 0 (disabled) to 65535", port)
	}
	if addr == "" || port == 0 {
		return "", nil
	}
	if _, _, err := net.SplitHostPort(addr); err == nil {
		if portSet {
			return "", usageErrorf("--healthz-bind-address %q names a port and --healthz-port is set too: give the port once", addr)
		}
		return addr, nil
	}
	if net.ParseIP(strings.Trim(addr, "[]")) == nil {
		return "", usageErrorf("--healthz-bind-address %q: want an IP address, or host:port", addr)
	}
	return net.JoinHostPort(strings.Trim(addr, "[]"), strconv.Itoa(int(port))), nil
}

// parseTaints parses the kubelet's taint syntax, key=value:Effect or key:Effect. Keys,
// values and effects are checked by the agent.
func parseTaints(specs []string) ([]v1.Taint, error) {
	var taints []v1.Taint
	for _, s := range specs {
		kv, effect, ok := strings.Cut(s, ":")
		if !ok || effect == "" {
			return nil, fmt.Errorf("%q: want key=value:Effect or key:Effect", s)
		}
		key, value, _ := strings.Cut(kv, "=")
		if key == "" {
			return nil, fmt.Errorf("%q: the key is empty", s)
		}
		t := v1.Taint{Key: key, Value: value, Effect: v1.TaintEffect(effect)}
		if slices.ContainsFunc(taints, func(o v1.Taint) bool { return o.Key == t.Key && o.Effect == t.Effect }) {
			return nil, fmt.Errorf("%q: key %s and effect %s given twice", s, key, effect)
		}
		taints = append(taints, t)
	}
	return taints, nil
}

// parseResourceList turns name=quantity pairs into a resource list. Which names are allowed
// is the agent's to check.
func parseResourceList(m map[string]string) (v1.ResourceList, error) {
	if len(m) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	list := v1.ResourceList{}
	for _, name := range names {
		q, err := resource.ParseQuantity(m[name])
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %w", name, m[name], err)
		}
		list[v1.ResourceName(name)] = q
	}
	return list, nil
}

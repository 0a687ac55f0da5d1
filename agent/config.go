package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/endpoint"
)

// Defaults follow the kubelet's.
const (
	DefaultRootDir            = "/var/lib/kubelet"
	DefaultHealthzBindAddress = "127.0.0.1:10248"
	// DefaultResyncPeriod bounds how stale the pod source may get if a file event is missed.
	DefaultResyncPeriod = 10 * time.Second
)

// Config describes an Agent.
type Config struct {
	// RootDir holds pod-resources/kubelet.sock, pods/ (admission results) and, if set,
	// plugins_registry/. Default /var/lib/kubelet.
	RootDir string
	// DevicePluginDir holds kubelet.sock and the checkpoint. Default
	// /var/lib/kubelet/device-plugins (like the kubelet, it does not follow RootDir).
	DevicePluginDir string
	// PodManifestPath is a directory of pod manifests (YAML or JSON, one pod per file), watched
	// like the kubelet's static pod path. Empty: no manifest source.
	PodManifestPath string
	// HealthzBindAddress serves /healthz, /metrics and /status. Empty disables HTTP.
	HealthzBindAddress string
	// PluginWatcher enables registration through <RootDir>/plugins_registry.
	PluginWatcher bool
	// GracePeriod for stopped plugins; zero means the kubelet's 5 minutes.
	GracePeriod time.Duration
	// Policy selects kubelet-1.36 behaviour (zero) or kdm's improvements.
	Policy devicemanager.Policy
	// Endpoint carries the plugin RPC deadlines.
	Endpoint endpoint.Config
	// KubeClient, if set, makes the API server a pod source: pods bound to NodeName are
	// admitted and their outcome written to pod status, and the Node's device resources and
	// Lease are published.
	KubeClient kubernetes.Interface
	// NodeName is the node this agent stands for; required with KubeClient.
	NodeName string
	// NodeCapacity is published on the Node beside the device resources (see
	// NodePublisher.BaseCapacity); the daemon sets pods from --max-pods.
	NodeCapacity v1.ResourceList
	// NodeStatusUpdateFrequency bounds how stale the Node's device resources get; zero means
	// DefaultNodeStatusUpdateFrequency. Device changes are published at once.
	NodeStatusUpdateFrequency time.Duration
	// ResyncPeriod re-reads the manifest directory; zero means DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// Logger and Registry are the agent's logger and metrics registry (defaults: klog's
	// background logger, a fresh registry).
	Logger   klog.Logger
	Registry *prometheus.Registry
}

func (c Config) withDefaults() (Config, error) {
	if c.RootDir == "" {
		c.RootDir = DefaultRootDir
	}
	if c.DevicePluginDir == "" {
		c.DevicePluginDir = pluginapi.DevicePluginPath
	}
	if c.ResyncPeriod <= 0 {
		c.ResyncPeriod = DefaultResyncPeriod
	}
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	var errs []error
	for name, p := range map[string]string{"root dir": c.RootDir, "device plugin dir": c.DevicePluginDir} {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s must be an absolute path: %q", name, p))
		}
	}
	if c.KubeClient != nil && c.NodeName == "" {
		errs = append(errs, errors.New("a node name is required with a Kubernetes client"))
	}
	if c.PodManifestPath != "" && !filepath.IsAbs(c.PodManifestPath) {
		errs = append(errs, fmt.Errorf("pod manifest path must be an absolute path: %q", c.PodManifestPath))
	}
	return c, errors.Join(errs...)
}

// PodResourcesSocket is where the podresources API is served.
func (c Config) PodResourcesSocket() string {
	return filepath.Join(c.RootDir, "pod-resources", "kubelet.sock")
}

// PodsDir is where admission results are written, one JSON file per pod.
func (c Config) PodsDir() string { return filepath.Join(c.RootDir, "pods") }

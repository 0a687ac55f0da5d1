package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kdm-project/kdm/agent/internal/apitest"
)

func TestConfigValidate(t *testing.T) {
	api := apitest.NewFakeAPI()
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // in this order
	}{
		{"relative paths", Config{RootDir: "root", DevicePluginDir: "dp", PodResultsDir: "res", PodManifestPath: "m"}, []string{
			`root dir must be an absolute path: "root"`,
			`device plugin dir must be an absolute path: "dp"`,
			`pod results dir must be an absolute path: "res"`,
			`pod manifest path must be an absolute path: "m"`,
		}},
		{"client without node", Config{KubeClient: api}, []string{"a node name is required with a Kubernetes client"}},
		{"bad node name", Config{NodeName: "Edge_1"}, []string{
			`node name "Edge_1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
		}},
		{"labels and taints", Config{
			NodeLabels:         map[string]string{"zz": "ok", "a": strings.Repeat("v", 64)},
			RegisterWithTaints: []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoSchedule}, {Key: "", Effect: "Never"}},
		}, []string{
			`node labels: value "` + strings.Repeat("v", 64) + `" of "a": must be no more than 63 bytes`,
			`register-with-taints[1]: key "": name part must be non-empty`,
			`register-with-taints[1]: key "": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
			`register-with-taints[1]: effect "Never": want NoSchedule, PreferNoSchedule or NoExecute`,
		}},
		{"restricted label", Config{NodeLabels: map[string]string{"node-role.kubernetes.io/gpu": "", "node.kubernetes.io/pool": "a", "kubernetes.io/arch": "arm64"}}, []string{
			`node labels: "node-role.kubernetes.io/gpu": a node may not set kubernetes.io or k8s.io labels other than ` +
				strings.Join(kubeletLabels, ", ") + ", or those under kubelet.kubernetes.io, node.kubernetes.io",
		}},
		{"node IPs", Config{NodeIP: "10.0.0.1,10.0.0.2"}, []string{`node IP "10.0.0.1,10.0.0.2": two addresses must be one IPv4 and one IPv6`}},
		{"node IP garbage", Config{NodeIP: "edge"}, []string{`node IP "edge": "edge" is not an IP address`}},
		{"node IP unspecified", Config{NodeIP: "0.0.0.0"}, []string{`node IP "0.0.0.0": 0.0.0.0 is unspecified`}},
		{"resources", Config{
			SystemReserved:   v1.ResourceList{"pods": resource.MustParse("1"), "cpu": resource.MustParse("-1")},
			KubeReserved:     v1.ResourceList{"memory": resource.MustParse("1Gi")},
			CapacityOverride: v1.ResourceList{"pid": resource.MustParse("100")},
			NodeCapacity:     v1.ResourceList{"example.com/gpu": resource.MustParse("1")},
		}, []string{
			"system reserved: cpu must not be negative: -1",
			`system reserved: unsupported resource "pods" (want one of cpu, memory, ephemeral-storage, pid)`,
			`capacity override: unsupported resource "pid" (want one of cpu, memory, ephemeral-storage)`,
			`node capacity: "example.com/gpu" is a device resource, published by the device manager only`,
		}},
		{"durations", Config{GracePeriod: -time.Second, NodeStatusUpdateFrequency: -time.Second, ResyncPeriod: -time.Second}, []string{
			"grace period must not be negative: -1s",
			"node status update frequency must not be negative: -1s",
			"resync period must not be negative: -1s",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 3 { // the order must not depend on map iteration
				err := tc.cfg.Validate()
				if err == nil {
					t.Fatal("Validate() = nil")
				}
				if diff := cmp.Diff(tc.want, strings.Split(err.Error(), "\n")); diff != "" {
					t.Fatalf("errors (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestConfigZeroValueIsValid(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	d := Config{}.withDefaults()
	if err := d.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if d.PodsDir() != "/var/lib/kubelet/kdm/pods" || d.legacyPodsDir() != "/var/lib/kubelet/pods" {
		t.Errorf("results dir %q (legacy %q)", d.PodsDir(), d.legacyPodsDir())
	}
	if d.Clock == nil || d.ResyncPeriod != DefaultResyncPeriod || d.NodeStatusUpdateFrequency != DefaultNodeStatusUpdateFrequency {
		t.Errorf("defaults not applied: %+v", d)
	}
	ok := Config{NodeIP: "10.0.0.1, fd00::1", KubeClient: apitest.NewFakeAPI(), NodeName: "edge-1",
		SystemReserved: v1.ResourceList{"pid": resource.MustParse("100"), "cpu": resource.MustParse("1")}}
	if err := ok.Validate(); err != nil {
		t.Errorf("dual-stack config: %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	_, err := New(Config{RootDir: "relative"})
	if err == nil || !strings.Contains(err.Error(), `invalid agent config: root dir must be an absolute path: "relative"`) {
		t.Fatalf("New() error %v", err)
	}
}

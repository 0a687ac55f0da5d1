package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/kdm-project/kdm/agent"
)

func init() {
	// Tests run `kdm run` several times in one process, each applying the same default
	// logging configuration; a real process applies it once.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
}

// parseRun parses a `kdm run` command line into the agent configuration.
func parseRun(t *testing.T, args ...string) (agent.Config, *runOptions, error) {
	t.Helper()
	var stderr bytes.Buffer
	fs, o := newRunFlags(&stderr)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v (stderr %q)", args, err, stderr.String())
	}
	cfg, err := o.agentConfig(fs)
	return cfg, o, err
}

// TestRunFlagsToAgentConfig: every kubelet-named flag reaches its agent.Config field, in the
// kubelet's syntax.
func TestRunFlagsToAgentConfig(t *testing.T) {
	cfg, _, err := parseRun(t,
		"--root-dir=/r", "--device-plugin-dir", "/dp", "--pod-results-dir=/results",
		"--node-labels=a.example.com/pool=gpu,zone=z1", "--node-labels", "b=2",
		"--register-with-taints=gpu=true:NoSchedule,dedicated:PreferNoSchedule",
		"--node-ip=10.0.0.5", "--system-reserved=cpu=100m,memory=1Gi", "--kube-reserved", "memory=512Mi,pid=100",
		"--node-capacity=cpu=64,memory=256Gi", "--healthz-bind-address=0.0.0.0", "--healthz-port=10249",
		"--kubeconfig=/kc", "--max-pods=30", "-v=3")
	if err != nil {
		t.Fatal(err)
	}
	q := resource.MustParse
	want := map[string]any{
		"RootDir": "/r", "DevicePluginDir": "/dp", "PodResultsDir": "/results",
		"NodeLabels":         map[string]string{"a.example.com/pool": "gpu", "zone": "z1", "b": "2"},
		"RegisterWithTaints": []v1.Taint{{Key: "gpu", Value: "true", Effect: v1.TaintEffectNoSchedule}, {Key: "dedicated", Effect: v1.TaintEffectPreferNoSchedule}},
		"NodeIP":             "10.0.0.5",
		"SystemReserved":     v1.ResourceList{v1.ResourceCPU: q("100m"), v1.ResourceMemory: q("1Gi")},
		"KubeReserved":       v1.ResourceList{v1.ResourceMemory: q("512Mi"), "pid": q("100")},
		"CapacityOverride":   v1.ResourceList{v1.ResourceCPU: q("64"), v1.ResourceMemory: q("256Gi")},
		"HealthzBindAddress": "0.0.0.0:10249",
		"NodeCapacity":       v1.ResourceList{v1.ResourcePods: q("30")},
	}
	got := map[string]any{
		"RootDir": cfg.RootDir, "DevicePluginDir": cfg.DevicePluginDir, "PodResultsDir": cfg.PodResultsDir,
		"NodeLabels": cfg.NodeLabels, "RegisterWithTaints": cfg.RegisterWithTaints, "NodeIP": cfg.NodeIP,
		"SystemReserved": cfg.SystemReserved, "KubeReserved": cfg.KubeReserved, "CapacityOverride": cfg.CapacityOverride,
		"HealthzBindAddress": cfg.HealthzBindAddress, "NodeCapacity": cfg.NodeCapacity,
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("agent.Config from the flags (-want +got):\n%s", diff)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the agent refuses the configuration: %v", err)
	}
}

// TestRunFlagsDefaults: without flags, kdm takes the kubelet's paths and healthz address,
// and publishes no Node.
func TestRunFlagsDefaults(t *testing.T) {
	cfg, _, err := parseRun(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RootDir != agent.DefaultRootDir || cfg.HealthzBindAddress != agent.DefaultHealthzBindAddress ||
		cfg.PodResultsDir != "" || cfg.NodeCapacity != nil || cfg.NodeLabels != nil || cfg.RegisterWithTaints != nil {
		t.Errorf("defaults: root %q healthz %q results %q capacity %v labels %v taints %v", cfg.RootDir,
			cfg.HealthzBindAddress, cfg.PodResultsDir, cfg.NodeCapacity, cfg.NodeLabels, cfg.RegisterWithTaints)
	}
}

// TestHealthzAddress: the kubelet's address and port flags, the host:port form kdm took
// before, and the ways to disable the endpoint.
func TestHealthzAddress(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    string
		wantErr string
	}{
		{nil, "127.0.0.1:10248", ""},
		{[]string{"--healthz-port=10250"}, "127.0.0.1:10250", ""},
		{[]string{"--healthz-bind-address=::1"}, "[::1]:10248", ""},
		{[]string{"--healthz-bind-address=127.0.0.1:9000"}, "127.0.0.1:9000", ""},
		{[]string{"--healthz-bind-address=localhost:9000"}, "localhost:9000", ""},
		{[]string{"--healthz-bind-address="}, "", ""},
		{[]string{"--healthz-port=0"}, "", ""},
		{[]string{"--healthz-bind-address=127.0.0.1:9000", "--healthz-port=9001"}, "", "give the port once"},
		{[]string{"--healthz-port=70000"}, "", "want 0 (disabled) to 65535"},
		{[]string{"--healthz-bind-address=not-an-ip"}, "", "want an IP address, or host:port"},
	} {
		cfg, _, err := parseRun(t, tc.args...)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want one saying %q", tc.args, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case cfg.HealthzBindAddress != tc.want:
			t.Errorf("%q: healthz address %q, want %q", tc.args, cfg.HealthzBindAddress, tc.want)
		}
	}
}

// TestParseTaints: the kubelet's key=value:Effect syntax; the agent checks keys and effects.
func TestParseTaints(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    []v1.Taint
		wantErr string
	}{
		{in: nil},
		{in: []string{"k=v:NoExecute"}, want: []v1.Taint{{Key: "k", Value: "v", Effect: v1.TaintEffectNoExecute}}},
		{in: []string{"k:NoSchedule"}, want: []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoSchedule}}},
		{in: []string{"k=v"}, wantErr: "want key=value:Effect or key:Effect"},
		{in: []string{"k=v:"}, wantErr: "want key=value:Effect or key:Effect"},
		{in: []string{"=v:NoSchedule"}, wantErr: "the key is empty"},
		{in: []string{"k=a:NoSchedule", "k=b:NoSchedule"}, wantErr: "given twice"},
	} {
		got, err := parseTaints(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want one saying %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !cmp.Equal(got, tc.want) {
			t.Errorf("%q: got %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestRunRefusesBadIdentityFlags: `kdm run` exits 2, naming the flag, for values the
// command line or the agent refuses, before it starts anything.
func TestRunRefusesBadIdentityFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--register-with-taints", "nocolon"}, "--register-with-taints: \"nocolon\": want key=value:Effect"},
		{[]string{"--register-with-taints", "k=v:Sometimes"}, `effect "Sometimes"`},
		{[]string{"--system-reserved", "cpu=lots"}, "--system-reserved: cpu=lots:"},
		{[]string{"--node-capacity", "nvidia.com/gpu=8"}, "capacity override"},
		{[]string{"--node-labels", "bad key=v"}, "node labels: key \"bad key\""},
		{[]string{"--node-ip", "0.0.0.0"}, "is unspecified"},
		{[]string{"--healthz-port", "-1"}, "--healthz-port -1"},
		{[]string{"--logging-format", "xml"}, "logging flags"},
		{[]string{"--version=maybe"}, "want true, false or raw"},
		{[]string{"extra"}, `expected no arguments, got 1: "extra"`},
	} {
		dir := t.TempDir()
		args := append([]string{"run", "--root-dir", dir, "--device-plugin-dir", dir, "--healthz-bind-address", ""}, tc.args...)
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("kdm %s: exit %d, stderr %q; want exit 2 saying %q", strings.Join(args, " "), code, errOut.String(), tc.want)
		}
	}
}

// TestRunVersion: --version prints one line and exits 0 without starting anything (the
// directories do not exist); --version=raw prints the record as JSON.
func TestRunVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"run", "--version", "--root-dir", "/nonexistent/kdm"}, &out, &errOut); code != 0 {
		t.Fatalf("kdm run --version: exit %d, stderr %q", code, errOut.String())
	}
	// A test binary is not stamped, and Go records no VCS revision in it.
	if got, want := out.String(), "kdm unknown (commit unknown, kubelet "+agent.ReportedVersion()+")\n"; got != want {
		t.Errorf("kdm run --version printed %q, want %q", got, want)
	}
	out.Reset()
	if code := run([]string{"run", "--version=raw"}, &out, &errOut); code != 0 {
		t.Fatalf("kdm run --version=raw: exit %d, stderr %q", code, errOut.String())
	}
	var info versionInfo
	if err := json.Unmarshal(out.Bytes(), &info); err != nil || info.Version != agent.ReportedVersion() || info.GoVersion == "" || info.Platform == "" {
		t.Errorf("kdm run --version=raw printed %q (%v); want JSON with version %s, goVersion and platform", out.String(), err, agent.ReportedVersion())
	}
}

// TestVersionStamped: what the Makefile stamps with -ldflags -X main.version and main.commit is
// what `kdm version` prints, in text and JSON.
func TestVersionStamped(t *testing.T) {
	oldV, oldC := version, commit
	t.Cleanup(func() { version, commit = oldV, oldC })
	version, commit = "0.1.0-3-gabcdef1", "abcdef123456"
	var out, errOut bytes.Buffer
	if code := run([]string{"version"}, &out, &errOut); code != 0 {
		t.Fatalf("kdm version: exit %d, stderr %q", code, errOut.String())
	}
	if got, want := out.String(), "kdm 0.1.0-3-gabcdef1 (commit abcdef123456, kubelet "+agent.ReportedVersion()+")\n"; got != want {
		t.Errorf("kdm version printed %q, want %q", got, want)
	}
	out.Reset()
	if code := run([]string{"version", "-o", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("kdm version -o json: exit %d, stderr %q", code, errOut.String())
	}
	var info versionInfo
	if err := json.Unmarshal(out.Bytes(), &info); err != nil || info.BuildVersion != version || info.Commit != commit {
		t.Errorf("kdm version -o json printed %q (%v); want buildVersion %s and commit %s", out.String(), err, version, commit)
	}
}

// TestRunHelpListsKubeletFlags: -h exits 0 and documents, on stdout, the kubelet-named flags and the
// component-base logging flags.
func TestRunHelpListsKubeletFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"run", "-h"}, &out, &errOut); code != 0 {
		t.Fatalf("kdm run -h: exit %d", code)
	}
	for _, flag := range []string{"--node-labels", "--register-with-taints", "--node-ip", "--system-reserved", "--kube-reserved",
		"--node-capacity", "--pod-results-dir", "--healthz-bind-address", "--healthz-port", "--version", "-v, --v", "--vmodule", "--logging-format"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("kdm run -h does not list %s", flag)
		}
	}
}

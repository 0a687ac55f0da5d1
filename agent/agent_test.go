package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent/internal/apitest"
	"github.com/kdm-project/kdm/agent/manifests"
	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
)

func TestMain(m *testing.M) { os.Exit(apitest.Main(m, testCluster)) }

type fixture struct {
	t                         *testing.T
	base, plugins, root, pods string
}

func newFixture(t *testing.T) *fixture {
	base, err := os.MkdirTemp("", "kdm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	// The agent never creates its manifest directory; the operator (here, the fixture) does.
	if err := os.Mkdir(filepath.Join(base, "pods"), 0o750); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, base: base, plugins: filepath.Join(base, "dp"), root: filepath.Join(base, "root"), pods: filepath.Join(base, "pods")}
}

// run starts an agent and returns it with a stop function that waits for Run to return.
func (f *fixture) run() (*Agent, func()) {
	f.t.Helper()
	return f.runWith(Config{PodManifestPath: f.pods})
}

// runWith is run with cfg's pod sources; the fixture sets the directories and logger.
func (f *fixture) runWith(cfg Config) (*Agent, func()) {
	f.t.Helper()
	cfg.RootDir, cfg.DevicePluginDir = f.root, f.plugins
	cfg.Logger = ktesting.NewLogger(f.t, ktesting.NewConfig(ktesting.Verbosity(2)))
	a, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("Run: %v", err)
		}
	}
	f.t.Cleanup(stop)
	f.waitFor(a, "kubelet.sock", func(statusapi.NodeStatus) bool {
		_, err := os.Stat(filepath.Join(f.plugins, "kubelet.sock"))
		return err == nil
	})
	return a, stop
}

func (f *fixture) plugin(ids ...string) *plugintest.Plugin {
	f.t.Helper()
	var devs []*pluginapi.Device
	for _, id := range ids {
		devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	p, err := plugintest.New(deviceplugin.Config{ResourceName: "example.com/gpu", PluginDir: f.plugins, Devices: devs,
		Logger: ktesting.NewLogger(f.t, ktesting.NewConfig(ktesting.Verbosity(1)))})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(p.Stop)
	return p
}

// waitFor polls the agent's status; the agent reports through its status only.
func (f *fixture) waitFor(a *Agent, what string, cond func(statusapi.NodeStatus) bool) statusapi.NodeStatus {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := a.Status()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s; status %+v", what, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fixture) manifest(name string, gpus int) {
	f.t.Helper()
	body := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\nspec:\n  containers:\n  - name: main\n    image: x\n    resources:\n      limits:\n        example.com/gpu: " + string(rune('0'+gpus)) + "\n"
	if err := os.MkdirAll(f.pods, 0o750); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.pods, name+".yaml"), []byte(body), 0o600); err != nil {
		f.t.Fatal(err)
	}
}

func phase(st statusapi.NodeStatus, name string) *podresult.PodResult {
	for _, p := range st.Pods {
		if p.Name == name {
			return p
		}
	}
	return nil
}

func TestAdmissionFromManifests(t *testing.T) {
	f := newFixture(t)
	a, _ := f.run()
	f.plugin("g0", "g1", "g2")
	f.waitFor(a, "3 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 3 })

	f.manifest("first", 2)
	st := f.waitFor(a, "first admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "first")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	first := phase(st, "first")
	if opts := first.Containers[0].RunOptions; opts == nil || len(opts.Envs) != 1 || len(strings.Split(opts.Envs[0].Value, ",")) != 2 {
		t.Fatalf("first's run options: %+v", first.Containers[0].RunOptions)
	}
	if _, err := os.Stat(podresult.Path(filepath.Join(f.root, "kdm", "pods"), podresult.PodOf(first))); err != nil {
		t.Fatalf("no result file for first: %v", err)
	}

	f.manifest("second", 2)
	st = f.waitFor(a, "second rejected", func(st statusapi.NodeStatus) bool {
		p := phase(st, "second")
		return p != nil && p.Phase == podresult.PhaseRejected
	})
	second := phase(st, "second")
	want := "Allocate failed due to requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 1, which is unexpected"
	if second.Reason != ReasonUnexpectedAdmissionError || second.Message != want {
		t.Fatalf("rejection: reason %q message %q; want %q %q", second.Reason, second.Message, ReasonUnexpectedAdmissionError, want)
	}

	// Removing first releases its devices; a new pod gets them.
	if err := os.Remove(filepath.Join(f.pods, "first.yaml")); err != nil {
		t.Fatal(err)
	}
	f.waitFor(a, "first removed", func(st statusapi.NodeStatus) bool { return phase(st, "first") == nil })
	f.manifest("third", 3)
	f.waitFor(a, "third admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "third")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
}

// TestRestartKeepsDevices: a pod admitted before a restart keeps its devices after it, even
// though the plugin re-registers only later.
func TestRestartKeepsDevices(t *testing.T) {
	f := newFixture(t)
	a, stop := f.run()
	p := f.plugin("g0", "g1")
	f.waitFor(a, "2 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	f.manifest("keeper", 1)
	st := f.waitFor(a, "keeper admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "keeper")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	before := phase(st, "keeper").Containers[0].RunOptions.Envs[0].Value
	regs := p.Registrations()
	stop()

	b, _ := f.run()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.WaitForRegistrations(ctx, regs+1); err != nil {
		t.Fatalf("plugin did not re-register: %v", err)
	}
	st = f.waitFor(b, "keeper restored", func(st statusapi.NodeStatus) bool {
		p := phase(st, "keeper")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	if got := b.Manager().GetDevices(string(phase(st, "keeper").UID), "main")["example.com/gpu"]; len(got) != 1 {
		t.Fatalf("keeper holds %v after the restart", got)
	}
	if after := phase(st, "keeper").Containers[0].RunOptions.Envs[0].Value; after != before {
		t.Fatalf("keeper had %s, now %s", before, after)
	}
}

func TestBadManifestIsSkipped(t *testing.T) {
	f := newFixture(t)
	if err := os.MkdirAll(f.pods, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.pods, "bad.yaml"), []byte("kind: Service\nmetadata: {name: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pods, errs := manifests.Read(f.pods)
	if len(pods) != 0 || len(errs) != 1 || !strings.Contains(errs[0].Error(), "bad.yaml") || !strings.Contains(errs[0].Error(), `kind is "Service"`) {
		t.Fatalf("bad manifest: pods %v errs %v", pods, errs)
	}
}

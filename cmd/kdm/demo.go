package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/kdm-project/kdm/agent"
	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/deviceplugin/nvml"
)

const gpuResource = "nvidia.com/gpu"

// demo is one run of the tour; its steps print a story to out.
type demo struct {
	out      io.Writer
	base     string // temp dir holding everything
	pluginDr string
	rootDir  string
	podsDir  string // the agent's manifest directory
	samples  string // directory of sample manifests to copy in; "" for the embedded ones
	start    time.Time
	// ids shortens GPU IDs by the prefix all of the node's GPUs share, so that what tells
	// them apart is what is printed.
	ids idShortener
}

// demoAbout is the description in `kdm demo --help`.
const demoAbout = `A self-contained tour in a temporary directory: kdm's manager, the reference GPU plugin on eight
mock A100s, sample pods admitted from manifests, the checkpoint, a restart of kdm that keeps
every pod's GPUs, and one more pod. Nothing outside the temporary directory is touched.`

func runDemo(args []string, stdout, stderr io.Writer) int {
	c := newCommand("kdm demo", "kdm demo [flags]", demoAbout, stdout, stderr)
	fs := c.flags
	samples := fs.String("pods", "", "directory of sample pod manifests (`DIR`, *.yaml, at least two); default: the built-in samples, copies of testdata/pods")
	keep := fs.Bool("keep", false, "keep the demo's temporary directory")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return c.misuse("expected no arguments, got %d: %s", fs.NArg(), quoteArgs(fs.Args()))
	}
	base, err := os.MkdirTemp("", "kdm-demo-")
	if err != nil {
		return c.fail("%v", err)
	}
	if !*keep {
		defer func() { _ = os.RemoveAll(base) }()
	}
	d := &demo{out: stdout, base: base, pluginDr: filepath.Join(base, "device-plugins"), rootDir: filepath.Join(base, "kubelet"),
		podsDir: filepath.Join(base, "manifests"), samples: *samples, start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := d.run(ctx); err != nil {
		return c.fail("%v", err)
	}
	if *keep {
		fmt.Fprintf(stdout, "\nKept %s for you to explore.\n", base)
	}
	return 0
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%5.2fs] "+format+"\n", append([]any{time.Since(d.start).Seconds()}, args...)...)
}

func (d *demo) run(ctx context.Context) error {
	samples, err := loadSamples(d.samples)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.podsDir, 0o750); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "kdm demo: a device manager, eight mock A100 GPUs, sample pods, the checkpoint and a restart.\n"+
		"Policy: %s (kdm run's default: %s; --policy sets it)\nWorking in %s\n\n", demoPolicy().Name(), devicemanager.DefaultPolicyName(), d.base)

	plugin, err := nvml.New(nvml.Config{Mock: "dgxa100", PluginDir: d.pluginDr, Logger: quiet()})
	if err != nil {
		return fmt.Errorf("starting the mock GPU plugin: %w", err)
	}
	pctx, stopPlugin := context.WithCancel(ctx)
	pluginDone := make(chan error, 1)

	first, err := d.startAgent(ctx)
	if err != nil {
		stopPlugin()
		return err
	}
	go func() { pluginDone <- plugin.Run(pctx) }()
	defer func() {
		stopPlugin()
		<-pluginDone
	}()
	d.say("kdm started; the NVML plugin (go-nvml mock of a DGX A100) registered through %s", filepath.Join(d.pluginDr, "kubelet.sock"))
	if err := d.waitFor(ctx, first.agent, "8 GPUs advertised", func(st statusapi.NodeStatus) bool {
		return st.Capacity[gpuResource] == 8 && st.Allocatable[gpuResource] == 8
	}); err != nil {
		return err
	}
	d.printCapacity(first.agent.Status())
	d.learnIDs(first.agent.PageState())

	initial := samples[:len(samples)-1]
	for _, s := range initial {
		if err := s.writeInto(d.podsDir); err != nil {
			return err
		}
	}
	d.say("Placed %d pod manifests in the manifest directory", len(initial))
	if err := d.waitFor(ctx, first.agent, "pods admitted", func(st statusapi.NodeStatus) bool { return countAdmitted(st) == len(initial) }); err != nil {
		return err
	}
	before := gpusByContainer(first.agent.Status())
	d.printPods(first.agent.Status())
	d.printCheckpoint()

	d.say("Restarting kdm (the plugin is left running, as on a real node)")
	first.stop()
	second, err := d.startAgent(ctx)
	if err != nil {
		return err
	}
	defer second.stop()
	if st := second.agent.Status(); st.Allocatable[gpuResource] == 0 {
		d.say("Right after the restart: capacity %d, allocatable 0 (the resource is known only from the checkpoint until the plugin is back)", st.Capacity[gpuResource])
	}
	if err := d.waitFor(ctx, second.agent, "plugin re-registered", func(st statusapi.NodeStatus) bool { return st.Allocatable[gpuResource] == 8 }); err != nil {
		return err
	}
	d.say("The plugin saw kubelet.sock re-created and registered again by itself: capacity 8, allocatable 8")
	if err := d.waitFor(ctx, second.agent, "pods restored", func(st statusapi.NodeStatus) bool { return countAdmitted(st) == len(initial) }); err != nil {
		return err
	}
	after := gpusByContainer(second.agent.Status())
	for k, v := range before {
		if after[k] != v {
			return fmt.Errorf("container %s had GPUs %s before the restart and %s after", k, v, after[k])
		}
	}
	d.say("Every pod kept exactly the GPUs it had before the restart, without a new Allocate call")
	d.say("(ml/inference's completed init container kept its GPUs too: --policy kdm; the kubelet would reject that pod, kubernetes #124345)")

	last := samples[len(samples)-1]
	if err := last.writeInto(d.podsDir); err != nil {
		return err
	}
	d.say("Added one more pod: %s", last.name)
	if err := d.waitFor(ctx, second.agent, "new pod admitted", func(st statusapi.NodeStatus) bool { return countAdmitted(st) == len(samples) }); err != nil {
		return err
	}
	final := second.agent.Status()
	d.printPods(final)
	if err := disjoint(gpusByContainer(final)); err != nil {
		return err
	}
	d.say("No GPU is held by two pods. Done in %.1fs.", time.Since(d.start).Seconds())
	return nil
}

// demoPolicy is the policy the demo's manager runs, which its first lines name.
func demoPolicy() devicemanager.Policy { return devicemanager.KDMPolicy() }

// runningAgent is an agent and how to stop it.
type runningAgent struct {
	agent *agent.Agent
	stop  func()
}

func (d *demo) startAgent(ctx context.Context) (*runningAgent, error) {
	a, err := agent.New(agent.Config{RootDir: d.rootDir, DevicePluginDir: d.pluginDr, PodManifestPath: d.podsDir,
		Policy: demoPolicy(), Logger: quiet()})
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	// Run creates kubelet.sock before it serves; wait for it so that status calls are meaningful.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(d.pluginDr, "kubelet.sock")); err == nil {
			break
		}
		select {
		case err := <-done:
			cancel()
			return nil, fmt.Errorf("kdm stopped during start-up: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			return nil, errors.New("kdm did not create kubelet.sock within 10s")
		}
	}
	return &runningAgent{agent: a, stop: func() { cancel(); <-done }}, nil
}

// waitFor polls the agent's status until cond holds.
func (d *demo) waitFor(ctx context.Context, a *agent.Agent, what string, cond func(statusapi.NodeStatus) bool) error {
	for {
		if cond(a.Status()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for %s", what)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func (d *demo) printCapacity(st statusapi.NodeStatus) {
	d.say("Node resources: %s capacity %d, allocatable %d", gpuResource, st.Capacity[gpuResource], st.Allocatable[gpuResource])
}

func (d *demo) printPods(st statusapi.NodeStatus) {
	for _, p := range st.Pods {
		if p.Phase != podresult.PhaseAdmitted {
			fmt.Fprintf(d.out, "          pod %s/%s: %s %s: %s\n", p.Namespace, p.Name, p.Phase, p.Reason, p.Message)
			continue
		}
		fmt.Fprintf(d.out, "          pod %s/%s: %s\n", p.Namespace, p.Name, p.Phase)
		for _, c := range p.Containers {
			kind := "container"
			if c.Init {
				kind = "init container"
			}
			env := "(no devices)"
			if c.RunOptions != nil {
				for _, e := range c.RunOptions.Envs {
					if e.Name == "NVIDIA_VISIBLE_DEVICES" {
						env = e.Name + "=" + d.ids.text(gpuResource, e.Value)
					}
				}
			}
			fmt.Fprintf(d.out, "            %-14s %-9s %s\n", kind, c.Name, env)
		}
	}
}

func (d *demo) printCheckpoint() {
	path := filepath.Join(d.pluginDr, checkpoint.FileName)
	raw, err := checkpoint.ReadFile(path)
	if err != nil {
		d.say("No checkpoint yet: %v", err)
		return
	}
	data, layout, err := checkpoint.Decode(raw)
	if err != nil {
		d.say("Checkpoint does not verify: %v", err)
		return
	}
	d.say("Checkpoint %s: %d bytes, %s layout, checksum %d verified, %d entries (kdm inspect prints it in full)",
		checkpoint.FileName, len(raw), layout, checkpoint.Checksum(data), len(data.PodDeviceEntries))
}

func countAdmitted(st statusapi.NodeStatus) int {
	n := 0
	for _, p := range st.Pods {
		if p.Phase == podresult.PhaseAdmitted {
			n++
		}
	}
	return n
}

// gpusByContainer maps pod/container to its NVIDIA_VISIBLE_DEVICES.
func gpusByContainer(st statusapi.NodeStatus) map[string]string {
	out := map[string]string{}
	for _, p := range st.Pods {
		for _, c := range p.Containers {
			if c.RunOptions == nil {
				continue
			}
			for _, e := range c.RunOptions.Envs {
				if e.Name == "NVIDIA_VISIBLE_DEVICES" {
					out[p.Namespace+"/"+p.Name+"/"+c.Name] = e.Value
				}
			}
		}
	}
	return out
}

// disjoint checks that no GPU is visible to app containers of two different pods. Init
// containers share with their own pod's containers by design.
func disjoint(byContainer map[string]string) error {
	owner := map[string]string{}
	for k, v := range byContainer {
		pod := k[:strings.LastIndex(k, "/")]
		for _, id := range strings.Split(v, ",") {
			if prev, ok := owner[id]; ok && prev != pod {
				return fmt.Errorf("GPU %s visible to both %s and %s", id, prev, pod)
			}
			owner[id] = pod
		}
	}
	return nil
}

// learnIDs finds the prefix the node's GPU IDs share and says what the pods' lines will print
// in its place.
func (d *demo) learnIDs(st statusapi.PageState) {
	all := map[string][]string{}
	for _, r := range st.Resources {
		for _, dev := range r.Devices {
			all[r.Name] = append(all[r.Name], dev.ID)
		}
	}
	d.ids = newIDShortener(all)
	if p := d.ids[gpuResource]; p != "" {
		d.say("The GPUs' IDs all begin %s; below, %s stands for it: %s0 is %s0", p, idPrefixMark, idPrefixMark, p)
	}
}

// quiet is a logger that drops everything: the demo tells its own story.
func quiet() logr.Logger {
	return funcr.New(func(string, string) {}, funcr.Options{})
}

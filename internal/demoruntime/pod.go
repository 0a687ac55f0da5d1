package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/kdm-project/kdm/internal/containerdtest"
)

// The demo pod: one probe container asking for d.gpus GPUs, which reports what it sees and
// exits 0 a few seconds later (restartPolicy Never), so that the pod finishes and kdm frees
// its GPUs.
const (
	podNamespace = "demo"
	podName      = "gpu-probe"
	podUID       = "6b646d2d-6465-6d6f-2d72-756e74696d65"
)

func (d *demo) manifest() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  uid: %s
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  containers:
  - name: probe
    image: %s
    env:
    - name: PROBE_EXIT
      value: "0"
    - name: PROBE_EXIT_AFTER
      value: "3s"
    resources:
      limits:
        nvidia.com/gpu: %d
`, podName, podNamespace, podUID, containerdtest.ProbeImage, d.gpus)
}

// runPod places the pod's manifest, shows it running with its GPUs, prints what its container
// saw, waits for it to finish and shows its GPUs free.
func (d *demo) runPod(ctx context.Context) error {
	tmp := d.path("manifests", "."+podName+".yaml.tmp")
	if err := os.WriteFile(tmp, []byte(d.manifest()), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, d.path("manifests", podName+".yaml")); err != nil {
		return err
	}
	d.say("placed %s/%s.yaml: a pod whose container asks for %d GPUs, prints what it sees and exits 0 after 3s", d.path("manifests"), podName, d.gpus)
	var held []string
	if err := d.poll(ctx, "waiting for the pod to run", func() (bool, error) {
		p, ok, err := d.pod()
		if !ok || err != nil {
			return false, err
		}
		held = p.gpus()
		return p.Phase == "Admitted" && (p.RuntimePhase == "Running" || p.RuntimePhase == "Succeeded"), nil
	}); err != nil {
		return err
	}
	d.say("the pod runs, holding %d GPUs:\n%s", len(held), indent(d.kdmGet("pods")))
	report, logPath, err := d.probeReport(ctx)
	if err != nil {
		return err
	}
	if err := d.printSaw(report, logPath, held); err != nil {
		return err
	}
	if err := d.poll(ctx, "waiting for the pod to finish", func() (bool, error) {
		p, ok, err := d.pod()
		return ok && p.RuntimePhase == "Succeeded", err
	}); err != nil {
		return err
	}
	d.say("the container exited 0: the pod Succeeded")
	if err := d.waitResource(ctx, "the pod's GPUs freed", func(r resource) bool { return r.InUse == 0 && r.Free == 8 }); err != nil {
		return err
	}
	d.say("its %d GPUs are free again (a finished pod gives its devices back):\n%s\n%s", len(held), indent(d.kdmGet("pods")), indent(d.kdmGet("resources")))
	return nil
}

// probeReport waits for the container's complete report in its log.
func (d *demo) probeReport(ctx context.Context) (containerdtest.ProbeReport, string, error) {
	pattern := d.path("kubelet", "kdm", "pod-logs", podNamespace+"_"+podName+"_*", "probe", "*.log")
	var report containerdtest.ProbeReport
	var logPath string
	err := d.poll(ctx, "waiting for the container's report in "+pattern, func() (bool, error) {
		logs, _ := filepath.Glob(pattern)
		if len(logs) == 0 {
			return false, nil
		}
		sort.Strings(logs)
		b, err := os.ReadFile(logs[len(logs)-1])
		if err != nil {
			return false, nil
		}
		r, err := containerdtest.ParseProbe(containerdtest.CRILogPayload(b))
		if err != nil {
			return false, nil // not complete yet
		}
		report, logPath = r, logs[len(logs)-1]
		return true, nil
	})
	return report, logPath, err
}

var gpuNode = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

// printSaw prints the container's device nodes and environment, and checks them against the
// GPUs kdm gave it: one /dev/nvidia<N> per GPU, NVIDIA_VISIBLE_DEVICES naming exactly them.
func (d *demo) printSaw(r containerdtest.ProbeReport, logPath string, held []string) error {
	var b strings.Builder
	var gpuNodes []string
	visible := ""
	fmt.Fprintf(&b, "  device nodes:\n")
	for _, l := range r {
		if l.Kind == "device" && strings.HasPrefix(l.Path, "/dev/nvidia") {
			fmt.Fprintf(&b, "    %-22s %s %d:%d\n", l.Path, l.Type, l.Major, l.Minor)
			if gpuNode.MatchString(l.Path) {
				gpuNodes = append(gpuNodes, l.Path)
			}
		}
	}
	fmt.Fprintf(&b, "  environment:\n")
	for _, l := range r {
		if l.Kind == "env" {
			fmt.Fprintf(&b, "    %s=%s\n", l.Name, l.Value)
			if l.Name == "NVIDIA_VISIBLE_DEVICES" {
				visible = l.Value
			}
		}
	}
	d.say("what the container saw (its report, from %s):\n%s", logPath, b.String())
	ids := strings.Split(visible, ",")
	sort.Strings(ids)
	want := append([]string(nil), held...)
	sort.Strings(want)
	if len(gpuNodes) != len(held) || strings.Join(ids, ",") != strings.Join(want, ",") {
		return fmt.Errorf("the container saw GPU nodes %v and NVIDIA_VISIBLE_DEVICES=%q; kdm gave it %v", gpuNodes, visible, held)
	}
	d.say("it saw exactly its %d GPUs: one /dev/nvidia<N> each, and NVIDIA_VISIBLE_DEVICES naming them", len(held))
	return nil
}

// getPod is what the demo reads of `kdm get pods -o json`.
type getPod struct {
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`
	Phase        string `json:"phase"`
	RuntimePhase string `json:"runtimePhase"`
	Containers   []struct {
		Devices []struct {
			Resource string   `json:"resource"`
			IDs      []string `json:"ids"`
		} `json:"devices"`
	} `json:"containers"`
}

func (p getPod) gpus() []string {
	var ids []string
	for _, c := range p.Containers {
		for _, g := range c.Devices {
			if g.Resource == "nvidia.com/gpu" {
				ids = append(ids, g.IDs...)
			}
		}
	}
	return ids
}

// resource is what the demo reads of `kdm get resources -o json`.
type resource struct {
	Name    string `json:"name"`
	Devices int    `json:"devices"`
	InUse   int    `json:"inUse"`
	Free    int    `json:"free"`
}

// pod is the demo pod as `kdm get pods -o json` lists it; ok is false while it is not listed
// or kdm does not answer.
func (d *demo) pod() (getPod, bool, error) {
	var list struct {
		Items []getPod `json:"items"`
	}
	if err := d.kdmGetJSON("pods", &list); err != nil {
		return getPod{}, false, nil
	}
	for _, p := range list.Items {
		if p.Namespace == podNamespace && p.Name == podName {
			if p.Phase == "Rejected" {
				return p, false, fmt.Errorf("kdm rejected the pod:\n%s", d.kdmGet("pods"))
			}
			return p, true, nil
		}
	}
	return getPod{}, false, nil
}

// waitResource waits until `kdm get resources -o json` lists nvidia.com/gpu meeting cond.
func (d *demo) waitResource(ctx context.Context, what string, cond func(resource) bool) error {
	return d.poll(ctx, "waiting for "+what, func() (bool, error) {
		var list struct {
			Items []resource `json:"items"`
		}
		if err := d.kdmGetJSON("resources", &list); err != nil {
			return false, nil
		}
		for _, r := range list.Items {
			if r.Name == "nvidia.com/gpu" && cond(r) {
				return true, nil
			}
		}
		return false, nil
	})
}

func (d *demo) kdmGetArgs(kind string) []string {
	return []string{"get", kind, "--root-dir", d.path("kubelet"), "--address", d.addr}
}

// kdmGet is `kdm get <kind>`'s table, or what went wrong.
func (d *demo) kdmGet(kind string) string {
	args := d.kdmGetArgs(kind)
	out, err := exec.Command(d.bins[0], args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("kdm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return "$ kdm " + strings.Join(args, " ") + "\n" + string(out)
}

func (d *demo) kdmGetJSON(kind string, v any) error {
	out, err := exec.Command(d.bins[0], append(d.kdmGetArgs(kind), "-o", "json")...).Output()
	if err != nil {
		return err
	}
	return json.Unmarshal(out, v)
}

// policyLine is the policy kdm's start-up log names.
func (d *demo) policyLine() string {
	f, err := os.Open(d.path("kdm.log"))
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if i := bytes.Index(sc.Bytes(), []byte(`policy="`)); i >= 0 {
			rest := sc.Text()[i+len(`policy="`):]
			if j := strings.IndexByte(rest, '"'); j >= 0 {
				return rest[:j]
			}
		}
	}
	return "unknown"
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "         " + l
	}
	return strings.Join(lines, "\n")
}

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
)

// kdmGet runs the built `kdm get` against the node and returns its stdout; it fails the test
// unless kdm get exits 0 with nothing on stderr.
func (n *node) kdmGet(args ...string) string {
	n.t.Helper()
	args = append([]string{"get"}, args...)
	args = append(args, "--root-dir", n.rootDir, "--healthz-bind-address", n.healthAddr)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(binDir, "kdm"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		n.t.Fatalf("kdm %s: %v\nstderr:\n%s\nstdout:\n%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String()
}

// podTable is `kdm get pods`' table without the note under it, which it checks: kdm runs no
// containers in these tests, and the table must say so.
func podTable(t *testing.T, out string) string {
	t.Helper()
	table, note, _ := strings.Cut(out, "Note: ")
	if note != podresult.NoContainersMessage+".\n" {
		t.Errorf("kdm get pods ends with the note %q; want %q", note, podresult.NoContainersMessage+".\n")
	}
	return table
}

// rows splits a table into its rows of whitespace-separated fields, header first.
func rows(table string) [][]string {
	var out [][]string
	for _, l := range strings.Split(strings.TrimRight(table, "\n"), "\n") {
		out = append(out, strings.Fields(l))
	}
	return out
}

// getList is the part of a `kdm get -o json` document the test reads.
type getList struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Items      []struct {
		// pods
		Namespace  string `json:"namespace"`
		Name       string `json:"name"`
		UID        string `json:"uid"`
		Phase      string `json:"phase"`
		Reason     string `json:"reason"`
		Containers []struct {
			Name    string `json:"name"`
			Devices []struct {
				Resource string   `json:"resource"`
				IDs      []string `json:"ids"`
			} `json:"devices"`
		} `json:"containers"`
		// devices
		Resource string `json:"resource"`
		ID       string `json:"id"`
		Health   string `json:"health"`
		Holders  []struct {
			Pod       string `json:"pod"`
			Container string `json:"container"`
		} `json:"holders"`
		// resources
		Capacity    int64  `json:"capacity"`
		Allocatable int64  `json:"allocatable"`
		InUse       int    `json:"inUse"`
		Free        int    `json:"free"`
		Unhealthy   int    `json:"unhealthy"`
		Plugin      string `json:"plugin"`
		// plugins
		State                 string   `json:"state"`
		Socket                string   `json:"socket"`
		GraceRemainingSeconds *float64 `json:"graceRemainingSeconds"`
	} `json:"items"`
}

// kdmGetJSON runs `kdm get kind -o json` and decodes it, checking its apiVersion and kind.
func (n *node) kdmGetJSON(kind, wantKind string) getList {
	n.t.Helper()
	out := n.kdmGet(kind, "-o", "json")
	var l getList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		n.t.Fatalf("kdm get %s -o json: %v:\n%s", kind, err, out)
	}
	if l.APIVersion != "kdm.get/v1" || l.Kind != wantKind {
		n.t.Fatalf("kdm get %s -o json: apiVersion %q kind %q, want kdm.get/v1 %s", kind, l.APIVersion, l.Kind, wantKind)
	}
	return l
}

// TestGetAsksRunningKdm (issue 33): `kdm get` asks a real `kdm run` beside the mock GPU plugin
// what it holds, and every answer agrees with podresources and /status: the pods with their
// containers' GPUs (an admitted pod) or the rejection reason (a pod asking for more GPUs than
// the node has); each device with its holder; the resource's capacity, allocatable, in use
// and free counts; the plugin running on its socket, then, killed, stopped with its grace
// period counting down. Tables and JSON both.
func TestGetAsksRunningKdm(t *testing.T) {
	n := newNode(t)
	n.startServing("8 GPUs")
	held := n.admit("trainer", 2)
	n.writePod("toobig", 9)
	n.eventually("toobig rejected", func(st statusapi.NodeStatus) bool {
		p := pod(st, "toobig")
		return p != nil && p.Phase == podresult.PhaseRejected
	})

	// Pods: the table, golden but for the GPU IDs the manager chose.
	want := [][]string{
		{"NAMESPACE", "NAME", "STATUS", "CONTAINER", "RESOURCE", "DEVICES"},
		{"e2e", "toobig", "Rejected:", "UnexpectedAdmissionError", "-", "-", "-"},
		{"e2e", "trainer", "Admitted", "main", "nvidia.com/gpu", strings.Join(held, ",")},
	}
	if got := rows(podTable(t, n.kdmGet("pods"))); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("kdm get pods:\n%q\nwant\n%q", got, want)
	}
	pods := n.kdmGetJSON("pods", "PodList")
	byName := map[string]int{}
	for i, p := range pods.Items {
		byName[p.Name] = i
	}
	tr, tb := pods.Items[byName["trainer"]], pods.Items[byName["toobig"]]
	if len(pods.Items) != 2 || tr.UID != uidOf("trainer") || tr.Phase != "Admitted" || len(tr.Containers) != 1 ||
		len(tr.Containers[0].Devices) != 1 || !slices.Equal(tr.Containers[0].Devices[0].IDs, held) ||
		tb.Phase != "Rejected" || tb.Reason != "UnexpectedAdmissionError" {
		t.Errorf("kdm get pods -o json: %+v", pods.Items)
	}
	if pr := n.podResources(); !slices.Equal(sorted(pr["trainer"]), held) {
		t.Errorf("podresources gives trainer %v, kdm get %v", pr["trainer"], held)
	}

	// Devices: eight, the two held by trainer's container.
	devs := n.kdmGetJSON("devices", "DeviceList")
	var heldIDs []string
	for _, d := range devs.Items {
		if d.Resource != "nvidia.com/gpu" || d.Health != "Healthy" {
			t.Errorf("device %+v", d)
		}
		if len(d.Holders) > 0 {
			if len(d.Holders) != 1 || d.Holders[0].Pod != "e2e/trainer" || d.Holders[0].Container != "main" {
				t.Errorf("device %s held by %+v, want e2e/trainer main", d.ID, d.Holders)
			}
			heldIDs = append(heldIDs, d.ID)
		}
	}
	if len(devs.Items) != 8 || !slices.Equal(heldIDs, held) {
		t.Errorf("kdm get devices -o json: %d devices, held %v, want 8 and %v", len(devs.Items), heldIDs, held)
	}
	for _, r := range rows(n.kdmGet("devices"))[1:] {
		holder := slices.Contains(held, r[1])
		if holder != (strings.Join(r[4:], " ") == "e2e/trainer (main)") {
			t.Errorf("kdm get devices row %q", r)
		}
	}

	// Resources and plugins.
	wantRes := [][]string{
		{"RESOURCE", "CAPACITY", "ALLOCATABLE", "IN", "USE", "FREE", "UNHEALTHY", "PLUGIN"},
		{"nvidia.com/gpu", "8", "8", "2", "6", "0", "Running"},
	}
	if got := rows(n.kdmGet("resources")); !slices.EqualFunc(got, wantRes, slices.Equal) {
		t.Errorf("kdm get resources:\n%q\nwant\n%q", got, wantRes)
	}
	socket := filepath.Join(n.pluginDir, "nvidia-gpu.sock")
	wantPlugins := [][]string{{"RESOURCE", "STATE", "GRACE", "LEFT", "ENDPOINT"}, {"nvidia.com/gpu", "Running", "-", socket}}
	if got := rows(n.kdmGet("plugins")); !slices.EqualFunc(got, wantPlugins, slices.Equal) {
		t.Errorf("kdm get plugins:\n%q\nwant\n%q", got, wantPlugins)
	}

	// The plugin dies: its resource's plugin is Stopped, the grace period counting down.
	n.mu.Lock()
	plugin := n.plugins[0]
	n.mu.Unlock()
	plugin.kill()
	n.eventually("the GPUs unallocatable", gpus(0))
	pl := n.kdmGetJSON("plugins", "PluginList")
	if len(pl.Items) != 1 || pl.Items[0].State != "Stopped" || pl.Items[0].GraceRemainingSeconds == nil ||
		*pl.Items[0].GraceRemainingSeconds <= 0 || *pl.Items[0].GraceRemainingSeconds > 300 {
		t.Fatalf("kdm get plugins -o json after the plugin died: %+v", pl.Items)
	}
	r := rows(n.kdmGet("plugins"))
	if len(r) != 2 || r[1][1] != "Stopped" || r[1][3] != socket {
		t.Fatalf("kdm get plugins after the plugin died: %q, want Stopped on %s", r, socket)
	}
	if left, err := time.ParseDuration(r[1][2]); err != nil || left <= 0 || left > 5*time.Minute {
		t.Errorf("kdm get plugins after the plugin died: grace left %q, want some of the 5m grace period", r[1][2])
	}
	res := n.kdmGetJSON("resources", "ResourceList")
	if len(res.Items) != 1 || res.Items[0].Capacity != 8 || res.Items[0].Allocatable != 0 || res.Items[0].InUse != 2 || res.Items[0].Plugin != "Stopped" {
		t.Errorf("kdm get resources -o json after the plugin died: %+v", res.Items)
	}
}

// TestRejectedPodRetriedByEditingManifest: a pod rejected while its plugin was away stays
// rejected when the plugin returns (the kubelet's behaviour); editing its manifest (here an
// annotation) makes it a new pod, with a new UID derived from the new content, and that one is
// admitted. This is the retry the README describes. A manifest that sets metadata.uid keeps
// its identity through an edit and is not retried.
func TestRejectedPodRetriedByEditingManifest(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the manifest identity settle time (5 s); run by make test")
	}
	n := newNode(t)
	n.startServing("8 GPUs")
	n.mu.Lock()
	plugin := n.plugins[0]
	n.mu.Unlock()
	plugin.kill()
	n.eventually("the GPUs unallocatable", gpus(0))

	manifest := func(annotation string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: retry\n  namespace: e2e\n  annotations:\n    try: %q\n"+
			"spec:\n  containers:\n  - name: main\n    image: example.com/app\n    resources:\n%s", annotation, gpuLimit(1))
	}
	n.placeManifest("retry.yaml", manifest("1"))
	n.writePod("fixed", 1) // metadata.uid set
	first := n.eventually("both pods rejected", func(st statusapi.NodeStatus) bool {
		a, b := pod(st, "retry"), pod(st, "fixed")
		return a != nil && a.Phase == podresult.PhaseRejected && b != nil && b.Phase == podresult.PhaseRejected
	})
	oldUID := pod(first, "retry").UID

	n.startPlugin()
	n.eventually("the plugin back", gpus(8))
	if rows := rows(podTable(t, n.kdmGet("pods"))); len(rows) != 3 || rows[1][2] != "Rejected:" || rows[2][2] != "Rejected:" {
		t.Fatalf("after the plugin came back, kdm get pods:\n%q\nwant both pods still rejected", rows)
	}

	n.placeManifest("retry.yaml", manifest("2"))
	n.placeManifest("fixed.yaml", podManifest("fixed", uidOf("fixed"), "      limits:\n        nvidia.com/gpu: 1\n"+
		"      requests:\n        nvidia.com/gpu: 1\n"))
	st := n.eventually("the edited pod admitted as a new pod", func(st statusapi.NodeStatus) bool {
		p := pod(st, "retry")
		return p != nil && p.UID != oldUID && p.Phase == podresult.PhaseAdmitted && len(visible(p)) == 1
	})
	if p := pod(st, "fixed"); p == nil || p.Phase != podresult.PhaseRejected {
		t.Errorf("the pod with metadata.uid, edited: %+v; want it still rejected (same UID, same pod)", p)
	}
	pods := n.kdmGetJSON("pods", "PodList")
	for _, p := range pods.Items {
		if p.Name == "retry" && (p.UID != string(pod(st, "retry").UID) || p.Phase != "Admitted") {
			t.Errorf("kdm get pods -o json: retry %+v, want the new UID admitted", p)
		}
	}
}

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
)

// gpuResource is the mock plugin's resource name.
const gpuResource = "nvidia.com/gpu"

// observation is one look at the node from every side: /status, pods/*.json, the checkpoint
// through `kdm inspect --json`, and podresources. The last three are read only once /status
// shows every manifest's pod decided.
type observation struct {
	policy   string
	disk     map[string]int
	statusOK bool
	status   statusapi.NodeStatus
	complete bool // the other sources were read too

	results     map[string]*podresult.PodResult // by pod UID
	resultsErr  error
	inspect     *inspectedCheckpoint
	inspectErr  string
	podres      map[string][]string
	podresErr   error
	uidToName   map[string]string
	statusNotes []string // why the status is not yet converged
}

// inspectedCheckpoint is the part of `kdm inspect --json` the test reads.
type inspectedCheckpoint struct {
	Entries []struct {
		PodUID        string              `json:"podUID"`
		ContainerName string              `json:"containerName"`
		ResourceName  string              `json:"resourceName"`
		DeviceIDs     map[string][]string `json:"deviceIDs"`
	} `json:"entries"`
}

// converge observes the node every 50 ms until no invariant is violated or timeout passes,
// and returns the last observation with what it violated.
func (cl *crashLoop) converge(timeout time.Duration) (*observation, []string) {
	deadline := time.Now().Add(timeout)
	for {
		obs := cl.observe()
		violations := obs.check(cl.expect)
		if len(violations) == 0 || time.Now().After(deadline) {
			return obs, violations
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (cl *crashLoop) observe() *observation {
	obs := &observation{policy: cl.policy, disk: map[string]int{}, uidToName: map[string]string{}}
	for name, count := range cl.disk {
		obs.disk[name] = count
	}
	for _, name := range crashPods {
		obs.uidToName[podUIDOf(name)] = name
	}
	obs.status, obs.statusOK = cl.n.status()
	if !obs.statusOK {
		obs.statusNotes = append(obs.statusNotes, "kdm's /status does not answer")
		return obs
	}
	if c, a := obs.status.Capacity[gpuResource], obs.status.Allocatable[gpuResource]; c != 8 || a != 8 {
		obs.statusNotes = append(obs.statusNotes, fmt.Sprintf("%s capacity %d allocatable %d, want 8 and 8 (plugin not back)", gpuResource, c, a))
	}
	for _, name := range sortedKeys(obs.disk) {
		p := pod(obs.status, name)
		switch {
		case p == nil:
			obs.statusNotes = append(obs.statusNotes, fmt.Sprintf("pod %s has a manifest but no status", name))
		case string(p.UID) != podUIDOf(name):
			obs.statusNotes = append(obs.statusNotes, fmt.Sprintf("pod %s has status for UID %s, manifest says %s", name, p.UID, podUIDOf(name)))
		case p.Phase != podresult.PhaseAdmitted && p.Phase != podresult.PhaseRejected:
			obs.statusNotes = append(obs.statusNotes, fmt.Sprintf("pod %s is %q, not yet admitted or rejected", name, p.Phase))
		}
	}
	for _, p := range obs.status.Pods {
		if _, ok := obs.disk[p.Name]; !ok {
			obs.statusNotes = append(obs.statusNotes, fmt.Sprintf("status still lists pod %s (%s) whose manifest is gone", p.Name, p.Phase))
		}
	}
	if len(obs.statusNotes) > 0 {
		return obs
	}
	obs.complete = true
	obs.results, obs.resultsErr = readPodResults(cl.n.rootDir)
	obs.inspect, obs.inspectErr = inspectCheckpoint(filepath.Join(cl.n.pluginDir, checkpoint.FileName))
	obs.podres, obs.podresErr = listPodResources(filepath.Join(cl.n.rootDir, "pod-resources", "kubelet.sock"))
	return obs
}

// check lists the invariants the observation violates; expect holds the GPUs pods must keep.
func (o *observation) check(expect map[string][]string) []string {
	if !o.complete {
		return o.statusNotes
	}
	var v []string
	if o.resultsErr != nil {
		v = append(v, fmt.Sprintf("reading pods/*.json: %v", o.resultsErr))
	}
	if o.podresErr != nil {
		v = append(v, fmt.Sprintf("podresources List: %v", o.podresErr))
	}
	admitted := o.admitted()
	if o.inspectErr != "" {
		v = append(v, "invariant 1 (checkpoint readable): "+o.inspectErr)
	}
	ckpt := o.checkpointGPUs()
	// Invariant 2: nothing held twice, every source agrees.
	v = append(v, o.heldTwice("checkpoint", ckpt)...)
	v = append(v, o.heldTwice("status", admitted)...)
	v = append(v, o.heldTwice("podresources", o.podres)...)
	for _, name := range sortedKeys(admitted) {
		uid, devs := podUIDOf(name), admitted[name]
		views := map[string][]string{
			"NVIDIA_VISIBLE_DEVICES": sortedSet(visible(pod(o.status, name))),
			"podresources":           sortedSet(o.podres[name]),
			"checkpoint":             ckpt[name],
			"pods/*.json":            nil,
		}
		if r := o.results[uid]; r != nil && r.Phase == podresult.PhaseAdmitted {
			views["pods/*.json"] = resultGPUs(r)
		}
		// A pod whose resource no plugin had registered when it was admitted gets no GPU: the
		// kubelet's way, kept by its policy (nothing is lost or shared). The kdm policy waits for
		// the resource while the manager is young, so there it is a violation.
		if len(devs) == 0 && o.policy == devicemanager.KDMPolicyName {
			v = append(v, fmt.Sprintf("invariant 2: pod %s is admitted without any GPU", name))
		}
		for _, src := range sortedKeys(views) {
			if !equalStrings(views[src], devs) {
				v = append(v, fmt.Sprintf("invariant 2 (sources agree): pod %s holds %v in /status but %v in %s", name, devs, views[src], src))
			}
		}
	}
	for _, name := range sortedKeys(ckpt) {
		if _, ok := o.disk[name]; ok && admitted[name] == nil && len(ckpt[name]) > 0 {
			v = append(v, fmt.Sprintf("invariant 2 (no leak): the checkpoint gives GPUs %v to pod %s, which is not admitted", ckpt[name], name))
		}
	}
	for _, name := range sortedKeys(o.podres) {
		if _, ok := admitted[name]; !ok && len(o.podres[name]) > 0 {
			v = append(v, fmt.Sprintf("invariant 2: podresources gives GPUs %v to pod %s, which is not an admitted pod with a manifest", o.podres[name], name))
		}
	}
	// Invariant 3: admitted pods whose manifests stayed keep exactly their GPUs.
	for _, name := range sortedKeys(expect) {
		if _, ok := o.disk[name]; !ok {
			continue
		}
		p := pod(o.status, name)
		switch {
		case p == nil:
			v = append(v, fmt.Sprintf("invariant 3 (devices kept): pod %s held %v and its manifest stayed, but it has no status", name, expect[name]))
		case p.Phase != podresult.PhaseAdmitted:
			v = append(v, fmt.Sprintf("invariant 3 (devices kept): pod %s held %v and its manifest stayed, but it is now %s: %s %s", name, expect[name], p.Phase, p.Reason, p.Message))
		case !equalStrings(admitted[name], expect[name]):
			v = append(v, fmt.Sprintf("invariant 3 (devices kept): pod %s held %v and its manifest stayed, but now holds %v", name, expect[name], admitted[name]))
		}
	}
	return v
}

// admitted maps each admitted pod whose manifest is on disk to its GPUs in /status.
func (o *observation) admitted() map[string][]string {
	out := map[string][]string{}
	for _, p := range o.status.Pods {
		if _, ok := o.disk[p.Name]; !ok || p.Phase != podresult.PhaseAdmitted || string(p.UID) != podUIDOf(p.Name) {
			continue
		}
		out[p.Name] = resultGPUs(p)
	}
	return out
}

// checkpointGPUs maps each pod in the checkpoint (by name where the UID is one of the pool's,
// by UID otherwise) to its GPUs.
func (o *observation) checkpointGPUs() map[string][]string {
	out := map[string][]string{}
	if o.inspect == nil {
		return out
	}
	for _, e := range o.inspect.Entries {
		if e.ResourceName != gpuResource {
			continue
		}
		key := e.PodUID
		if name, ok := o.uidToName[key]; ok {
			key = name
		}
		for _, ids := range e.DeviceIDs {
			out[key] = append(out[key], ids...)
		}
	}
	for k := range out {
		out[k] = sortedSet(out[k])
	}
	return out
}

// heldTwice reports every GPU that the source gives to two pods.
func (o *observation) heldTwice(source string, byPod map[string][]string) []string {
	var v []string
	owner := map[string]string{}
	for _, name := range sortedKeys(byPod) {
		for _, id := range byPod[name] {
			if prev, ok := owner[id]; ok && prev != name {
				v = append(v, fmt.Sprintf("invariant 2 (held once): %s gives GPU %s to both %s and %s", source, id, prev, name))
			}
			owner[id] = name
		}
	}
	return v
}

// String prints the observation for a failure report.
func (o *observation) String() string {
	var b strings.Builder
	if !o.statusOK {
		b.WriteString("/status: no answer\n")
	} else {
		fmt.Fprintf(&b, "/status: capacity %v allocatable %v\n", o.status.Capacity, o.status.Allocatable)
		for _, p := range o.status.Pods {
			fmt.Fprintf(&b, "  %s uid=%s %s gpus=%v visible=%v %s%s%s\n", p.Name, p.UID, p.Phase, resultGPUs(p),
				visible(p), p.Reason, oneLine(" msg="+p.Message, p.Message), oneLine(" warning="+p.Warning, p.Warning))
		}
	}
	if !o.complete {
		return b.String()
	}
	fmt.Fprintf(&b, "pods/*.json:\n")
	for _, uid := range sortedKeys(o.results) {
		r := o.results[uid]
		fmt.Fprintf(&b, "  %s uid=%s %s gpus=%v\n", r.Name, uid, r.Phase, resultGPUs(r))
	}
	if o.inspectErr != "" {
		fmt.Fprintf(&b, "checkpoint: %s\n", o.inspectErr)
	} else {
		fmt.Fprintf(&b, "checkpoint (kdm inspect): %v\n", o.checkpointGPUs())
	}
	fmt.Fprintf(&b, "podresources: %v (err %v)\n", o.podres, o.podresErr)
	return b.String()
}

func oneLine(s, cond string) string {
	if cond == "" {
		return ""
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// readPodResults reads <root-dir>/kdm/pods/*.json, keyed by pod UID.
func readPodResults(rootDir string) (map[string]*podresult.PodResult, error) {
	byUID, err := podresult.ReadDir(resultsDir(rootDir))
	if err != nil {
		return nil, err
	}
	out := map[string]*podresult.PodResult{}
	for uid, r := range byUID {
		out[string(uid)] = r
	}
	return out, nil
}

// resultGPUs returns the GPUs of every container of a pod result, from the allocations it
// records, sorted.
func resultGPUs(r *podresult.PodResult) []string {
	var out []string
	for _, c := range r.Containers {
		out = append(out, c.Devices()[gpuResource]...)
	}
	return sortedSet(out)
}

// inspectCheckpoint runs the built `kdm inspect --json` on the checkpoint. A missing
// checkpoint reads as empty; any other failure is returned as text.
func inspectCheckpoint(path string) (*inspectedCheckpoint, string) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return &inspectedCheckpoint{}, ""
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(binDir, "kdm"), "inspect", "--json", path)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Sprintf("kdm inspect --json %s: %v: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	out := &inspectedCheckpoint{}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return nil, fmt.Sprintf("kdm inspect --json %s printed JSON that does not parse: %v", path, err)
	}
	return out, ""
}

// listPodResources lists the GPUs of every pod through the podresources API.
func listPodResources(sock string) (map[string][]string, error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, p := range resp.PodResources {
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				if d.ResourceName == gpuResource {
					out[p.Name] = append(out[p.Name], d.DeviceIds...)
				}
			}
		}
	}
	return out, nil
}

func sortedSet(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return slices.Compact(out)
}

func equalStrings(a, b []string) bool { return slices.Equal(a, b) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent"
	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/internal/state"
)

// inspectedEntry is one checkpoint entry with its allocation response decoded.
type inspectedEntry struct {
	PodUID string `json:"podUID"`
	// Pod is the pod's namespace/name, when a pod result of kdm's names its UID.
	Pod           string              `json:"pod,omitempty"`
	ContainerName string              `json:"containerName"`
	ResourceName  string              `json:"resourceName"`
	DeviceIDs     map[string][]string `json:"deviceIDs"`
	AllocResp     json.RawMessage     `json:"allocResp,omitempty"`
	AllocRespErr  string              `json:"allocRespError,omitempty"`
	resp          *pluginapi.ContainerAllocateResponse
}

type inspected struct {
	File              string              `json:"file"`
	Layout            string              `json:"layout"`
	Checksum          uint32              `json:"checksum"`
	Entries           []inspectedEntry    `json:"entries"`
	RegisteredDevices map[string][]string `json:"registeredDevices"`
	// Contested are the devices that entries of more than one pod name: records that
	// disagree, which kdm keeps held for every claimant (see state.Contest).
	Contested []inspectedContest `json:"contested,omitempty"`
}

// inspectedContest is one device that entries of several pods name.
type inspectedContest struct {
	ResourceName string   `json:"resourceName"`
	DeviceID     string   `json:"deviceID"`
	PodUIDs      []string `json:"podUIDs"`
}

// inspectAbout is the description in `kdm inspect --help`.
const inspectAbout = `Decodes and verifies a kubelet_internal_checkpoint, written by a kubelet or by kdm, and prints
its entries and registered devices. FILE defaults to the checkpoint under --root-dir
(<root-dir>/device-plugins/kubelet_internal_checkpoint).

The table groups entries by pod and names each pod namespace/name when kdm's pod results
(<root-dir>/kdm/pods/*.json) name its UID; without them a pod is its UID. Device IDs that share
a long common prefix within a resource (the mock GPUs' GPU-a100a100-0000-4000-8000-…) are shown
without it, as ~rest, and the prefix is printed above the table; a cell ending in … is cut to
fit the terminal; --wide and --json print every ID and cell in full. Exits 1 when the file
cannot be read or does not verify.`

func runInspect(args []string, stdout, stderr io.Writer) int {
	c := newCommand("kdm inspect", "kdm inspect [flags] [FILE]", inspectAbout, stdout, stderr)
	fs := c.flags
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	wide := fs.Bool("wide", false, "print every field in full, however long the lines get")
	width := fs.Int("width", defaultInspectWidth, "fit the table into `COLUMNS` characters (ignored with --wide)")
	rewrite := fs.String("rewrite", "", "write the checkpoint back to `OUT` in canonical order with a fresh checksum")
	rootDir := fs.String("root-dir", "", "the node's kubelet root directory (`DIR`): the default FILE and pod results are found under it (default: "+agent.DefaultRootDir+"; with FILE given, the directory above FILE's)")
	resultsDir := fs.String("pod-results-dir", "", "`DIR` of kdm's pod results (*.json), which name the checkpoint's pods (default: <root-dir>/kdm/pods)")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if fs.NArg() > 1 {
		return c.misuse("expected at most one checkpoint path, got %d: %s", fs.NArg(), quoteArgs(fs.Args()))
	}
	if *width < minInspectWidth {
		return c.misuse("--width %d is too narrow, the least is %d", *width, minInspectWidth)
	}
	file, root := fs.Arg(0), *rootDir
	switch {
	case file == "" && root == "":
		root = agent.DefaultRootDir
		file = filepath.Join(root, "device-plugins", checkpoint.FileName)
	case file == "":
		file = filepath.Join(root, "device-plugins", checkpoint.FileName)
	case root == "":
		// The kubelet's layout: <root>/device-plugins/kubelet_internal_checkpoint.
		root = filepath.Dir(filepath.Dir(file))
	}
	if *resultsDir == "" {
		*resultsDir = filepath.Join(root, "kdm", "pods")
	}
	raw, err := checkpoint.ReadFile(file) // a live node's file, never torn by its writer
	if err != nil {
		return c.fail("%v", err)
	}
	data, layout, err := checkpoint.Decode(raw)
	if err != nil {
		return c.fail("%s: %v", file, err)
	}
	out := describe(file, data, layout)
	if err := out.namePods(*resultsDir); err != nil {
		// Names are a convenience: the checkpoint is printed with pod UIDs alone.
		fmt.Fprintf(stderr, "kdm inspect: pods are named by UID only: reading pod results: %v\n", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return c.fail("%v", err)
		}
	} else if *wide {
		printWide(stdout, out)
	} else {
		printFitted(stdout, out, *width)
	}
	if *rewrite != "" {
		if err := writeCanonical(*rewrite, data); err != nil {
			return c.fail("rewriting %s: %v", *rewrite, err)
		}
		fmt.Fprintf(stderr, "kdm inspect: wrote %s in canonical order\n", *rewrite)
	}
	return exitOK
}

// namePods fills in each entry's pod namespace/name from the pod results in dir, as kdm writes
// them (podresult.ReadDir). A missing directory names nothing and is no error: a kubelet's
// node has none.
func (in *inspected) namePods(dir string) error {
	results, err := podresult.ReadDir(dir)
	if err != nil {
		return err
	}
	for i := range in.Entries {
		if r, ok := results[types.UID(in.Entries[i].PodUID)]; ok {
			in.Entries[i].Pod = r.Namespace + "/" + r.Name
		}
	}
	return nil
}

// podLabel is how the table names a pod: namespace/name and UID when a pod result names it,
// the UID alone otherwise.
func (in *inspected) podLabel(uid string) string {
	for _, e := range in.Entries {
		if e.PodUID == uid && e.Pod != "" {
			return display(e.Pod) + " (" + display(uid) + ")"
		}
	}
	return display(uid)
}

// describe decodes every entry's allocation response; one that does not decode is reported
// in the entry (the kubelet skips such entries on restore).
func describe(file string, d *checkpoint.Data, layout checkpoint.Layout) *inspected {
	s := d.Sorted()
	out := &inspected{File: file, Layout: layout.String(), Checksum: checkpoint.Checksum(d), RegisteredDevices: s.RegisteredDevices}
	if out.RegisteredDevices == nil {
		out.RegisteredDevices = map[string][]string{}
	}
	for _, e := range s.PodDeviceEntries {
		ie := inspectedEntry{PodUID: e.PodUID, ContainerName: e.ContainerName, ResourceName: e.ResourceName, DeviceIDs: map[string][]string{}}
		for n, ids := range e.DeviceIDs {
			ie.DeviceIDs[fmt.Sprint(n)] = ids
		}
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
			ie.AllocRespErr = err.Error()
		} else {
			ie.resp = resp
			if b, err := protojson.Marshal(resp); err == nil {
				ie.AllocResp = b
			}
		}
		out.Entries = append(out.Entries, ie)
	}
	for _, c := range state.FindContests(s.PodDeviceEntries) {
		out.Contested = append(out.Contested, inspectedContest{ResourceName: c.Resource, DeviceID: c.DeviceID, PodUIDs: c.PodUIDs})
	}
	return out
}

// writeCanonical writes d in canonical order (entries by pod UID, container, resource; device
// IDs ascending) with a fresh checksum: temp file in the target's directory, fsync, rename.
func writeCanonical(path string, d *checkpoint.Data) error {
	b, err := checkpoint.Encode(d.Sorted())
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".kdm-inspect-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr, os.Chmod(tmp, 0o600)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

func sortedStrings[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

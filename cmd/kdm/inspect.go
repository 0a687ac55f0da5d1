package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager/state"
)

// inspectedEntry is one checkpoint entry with its allocation response decoded.
type inspectedEntry struct {
	PodUID        string              `json:"podUID"`
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

func runInspect(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kdm inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	wide := fs.Bool("wide", false, "print every field in full, however long the lines get")
	width := fs.Int("width", defaultInspectWidth, "fit the table into `COLUMNS` characters (ignored with --wide)")
	rewrite := fs.String("rewrite", "", "write the checkpoint back to `OUT` in canonical order with a fresh checksum")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kdm inspect [--json | --wide | --width N] [--rewrite OUT] FILE")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	if *width < minInspectWidth {
		fmt.Fprintf(stderr, "kdm inspect: --width %d is too narrow, the least is %d\n", *width, minInspectWidth)
		return 2
	}
	file := fs.Arg(0)
	raw, err := checkpoint.ReadFile(file) // a live node's file, never torn by its writer
	if err != nil {
		fmt.Fprintf(stderr, "kdm inspect: %v\n", err)
		return 1
	}
	data, layout, err := checkpoint.Decode(raw)
	if err != nil {
		fmt.Fprintf(stderr, "kdm inspect: %s: %v\n", file, err)
		return 1
	}
	out := describe(file, data, layout)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "kdm inspect: %v\n", err)
			return 1
		}
	} else if *wide {
		printWide(stdout, out)
	} else {
		printFitted(stdout, out, *width)
	}
	if *rewrite != "" {
		if err := writeCanonical(*rewrite, data); err != nil {
			fmt.Fprintf(stderr, "kdm inspect: rewriting %s: %v\n", *rewrite, err)
			return 1
		}
		fmt.Fprintf(stderr, "kdm inspect: wrote %s in canonical order\n", *rewrite)
	}
	return 0
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

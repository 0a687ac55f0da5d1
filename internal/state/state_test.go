package state

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// TestState drives the core from the scripts in testdata/state: each command changes or
// queries one State and prints what it decided (`go test ./internal/state -rewrite`
// refreshes the expected output). Times are offsets from an arbitrary origin, the grace
// period is 5m unless a command says otherwise.
//
// Commands (arguments are key=value; lists are comma-separated):
//
//	new [keep-completed-init]           start over, with the kdm option if named
//	connect res=R                       a plugin instance of R is current
//	list res=R devices=a,b unhealthy=b numa=a:0,b:1   the current instance's device list
//	disconnect res=R at=T               the plugin went away at T
//	restored res=R at=T                 R is named by the checkpoint read at T
//	restore at=T                        a new State from a checkpoint: input lines
//	                                    "pod/ctr resource ids" and "registered resource"
//	running keys=pod/ctr,...            containers the runtime reports running at start
//	select pod=P ctr=C res=R n=N [reuse=ids] [ready] [hint=0,1] [prefer=ids|prefer-error]
//	                                    pick and reserve; prints the choice or the error
//	                                    (without prefer, the plugin offers no preference)
//	commit pod=P ctr=C res=R ids=...    turn the reservation into an assignment
//	allocate pod=P ctr=C res=R n=N [init] [ready] ...   select, commit and update the reuse pool
//	release res=R ids=...               drop reservations
//	gc active=P,...                     garbage-collect every other pod
//	capacity at=T [grace=D]             counts, removing expired resources
//	awaiting res=R at=T                 does deferred admission wait for R now?
//	hints pod=P ctr=C R=N... [numa=0,1] topology hints for a container
//	snapshot                            the checkpoint entries and registered devices
//	roundtrip                           snapshot, restore into a new State, compare
//	state                               everything, sorted
func TestState(t *testing.T) {
	datadriven.Walk(t, "../../testdata/state", func(t *testing.T, path string) {
		d := &driver{s: New(Options{})}
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			out, err := d.do(td)
			if err != nil {
				t.Fatalf("%s: %v", td.Pos, err)
			}
			return out
		})
	})
}

type driver struct {
	s    *State
	opts Options
}

var origin = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type args map[string]string

func parseArgs(td *datadriven.TestData) args {
	a := args{}
	for _, c := range td.CmdArgs {
		a[c.Key] = strings.Join(c.Vals, ",")
	}
	return a
}

func (a args) list(k string) []string {
	if a[k] == "" {
		return nil
	}
	return strings.Split(a[k], ",")
}

func (a args) has(k string) bool { _, ok := a[k]; return ok }

func (a args) at(k string) (time.Time, error) {
	if a[k] == "" {
		return origin, nil
	}
	d, err := time.ParseDuration(a[k])
	return origin.Add(d), err
}

func (a args) grace() (time.Duration, error) {
	if a["grace"] == "" {
		return 5 * time.Minute, nil
	}
	return time.ParseDuration(a["grace"])
}

// atAndGrace is the "at" time and the grace period of commands that take both.
func (a args) atAndGrace() (time.Time, time.Duration, error) {
	at, err := a.at("at")
	if err != nil {
		return at, 0, err
	}
	grace, err := a.grace()
	return at, grace, err
}

func (d *driver) do(td *datadriven.TestData) (string, error) {
	a := parseArgs(td)
	res := a["res"]
	switch td.Cmd {
	case "new":
		d.opts = Options{KeepCompletedInitDevices: a.has("keep-completed-init")}
		d.s = New(d.opts)
		return "ok\n", nil
	case "connect":
		d.s.Connect(res)
		return "ok\n", nil
	case "list":
		devs, err := deviceList(a)
		if err != nil {
			return "", err
		}
		changed := d.s.applyDeviceList(res, devs, true)
		sort.Strings(changed)
		return fmt.Sprintf("changed %v\n", changed), nil
	case "disconnect":
		at, err := a.at("at")
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("known %v\n", d.s.Disconnect(res, at)), nil
	case "restored":
		at, err := a.at("at")
		if err != nil {
			return "", err
		}
		d.s.AddRestored(res, at)
		return "ok\n", nil
	case "running":
		var keys []ContainerKey
		for _, k := range a.list("keys") {
			pod, ctr, _ := strings.Cut(k, "/")
			keys = append(keys, ContainerKey{PodUID: pod, ContainerName: ctr})
		}
		d.s.SetRunning(keys)
		return "ok\n", nil
	case "select":
		req, prefer, err := request(a)
		if err != nil {
			return "", err
		}
		ids, outcome, err := d.s.Select(req, prefer)
		return selection(ids, outcome, err), nil
	case "allocate":
		req, prefer, err := request(a)
		if err != nil {
			return "", err
		}
		if !a.has("reuse") {
			req.Reusable = d.s.reusePool(req.PodUID)[res]
		}
		ids, outcome, err := d.s.Select(req, prefer)
		if err == nil && ids.Len() > 0 {
			devs, missing, ok := d.s.DevicesPerNUMA(res, ids)
			if !ok {
				return "", fmt.Errorf("device %s not listed", missing)
			}
			d.s.Commit(req.PodUID, req.Container, res, ids, devs, &pluginapi.ContainerAllocateResponse{})
		}
		if err == nil {
			d.s.reusePool(req.PodUID)
			d.s.containerAllocated(req.PodUID, req.Container, a.has("init"))
		}
		return selection(ids, outcome, err), nil
	case "commit":
		ids := sets.New(a.list("ids")...)
		devs, missing, ok := d.s.DevicesPerNUMA(res, ids)
		if !ok {
			return fmt.Sprintf("device %s is not listed\n", missing), nil
		}
		d.s.Commit(a["pod"], a["ctr"], res, ids, devs, &pluginapi.ContainerAllocateResponse{})
		return "ok\n", nil
	case "release":
		d.s.release(res, sets.New(a.list("ids")...))
		return "ok\n", nil
	case "gc":
		removed := d.s.RemoveInactive(sets.New(a.list("active")...))
		return fmt.Sprintf("removed %v\n", removed), nil
	case "capacity":
		at, grace, err := a.atAndGrace()
		if err != nil {
			return "", err
		}
		counts, removed := capacityCounts(d.s, at, grace)
		var b strings.Builder
		for _, name := range SortedKeys(counts) {
			fmt.Fprintf(&b, "%s: capacity %d, allocatable %d\n", name, counts[name].Capacity, counts[name].Allocatable)
		}
		if len(removed) > 0 {
			fmt.Fprintf(&b, "removed %v\n", removed)
		}
		if b.Len() == 0 {
			return "none\n", nil
		}
		return b.String(), nil
	case "awaiting":
		at, grace, err := a.atAndGrace()
		if err != nil {
			return "", err
		}
		left, away := d.s.GraceLeft(res, at, grace)
		out := fmt.Sprintf("awaiting %v", d.s.AwaitingPlugin(res, at, grace))
		if away {
			out += fmt.Sprintf(", grace left %v", left.Round(time.Second))
		}
		return out + "\n", nil
	case "hints":
		requests := map[string]int{}
		for k, v := range a {
			if strings.Contains(k, "/") {
				n, err := strconv.Atoi(v)
				if err != nil {
					return "", err
				}
				requests[k] = n
			}
		}
		var machine []int
		for _, n := range a.list("numa") {
			i, err := strconv.Atoi(n)
			if err != nil {
				return "", err
			}
			machine = append(machine, i)
		}
		pod, ctr := a["pod"], a["ctr"]
		hints := d.s.Hints(requests, func(r string) sets.Set[string] { return d.s.ContainerDevices(pod, ctr, r) },
			func(r string) sets.Set[string] { return d.s.PoolOf(pod, r) }, machine, false)
		var b strings.Builder
		for _, r := range SortedKeys(hints) {
			fmt.Fprintf(&b, "%s:", r)
			switch {
			case hints[r] == nil:
				b.WriteString(" any")
			case len(hints[r]) == 0:
				b.WriteString(" none")
			}
			for _, h := range hints[r] {
				fmt.Fprintf(&b, " %v", h.NUMANodes)
				if h.Preferred {
					b.WriteString("*")
				}
			}
			b.WriteString("\n")
		}
		return b.String(), nil
	case "snapshot":
		return snapshot(d.s), nil
	case "restore":
		at, err := a.at("at")
		if err != nil {
			return "", err
		}
		var entries []checkpoint.PodDevicesEntry
		var registered []string
		for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "registered":
				registered = append(registered, f[1])
			case len(f) == 3:
				pod, ctr, _ := strings.Cut(f[0], "/")
				entries = append(entries, checkpoint.PodDevicesEntry{PodUID: pod, ContainerName: ctr, ResourceName: f[1],
					DeviceIDs: checkpoint.DevicesPerNUMA{NoTopology: strings.Split(f[2], ",")}, AllocResp: []byte{}})
			default:
				return "", fmt.Errorf("restore: %q: want pod/ctr resource ids, or registered resource", line)
			}
		}
		d.s = New(d.opts)
		bad := d.s.restoreAssignments(entries, nil)
		for _, r := range registered {
			d.s.AddRestored(r, at)
		}
		return fmt.Sprintf("restored %d entries, %d skipped\n", len(entries)-len(bad), len(bad)), nil
	case "roundtrip":
		snap := d.s.Prepared().Data()
		n := New(d.opts)
		if bad := n.restoreAssignments(snap.PodDeviceEntries, nil); len(bad) > 0 {
			return "", fmt.Errorf("entries did not decode: %v", bad)
		}
		for r := range snap.RegisteredDevices {
			n.AddRestored(r, origin)
		}
		got := n.Prepared().Data()
		if !reflect.DeepEqual(snap.PodDeviceEntries, got.PodDeviceEntries) || len(snap.RegisteredDevices) != len(got.RegisteredDevices) {
			return fmt.Sprintf("differs:\n%s---\n%s", snapshot(d.s), snapshot(n)), nil
		}
		return fmt.Sprintf("%d entries and %d resources restored as written\n", len(got.PodDeviceEntries), len(got.RegisteredDevices)), nil
	case "state":
		return dump(d.s), nil
	}
	return "", fmt.Errorf("unknown command %q", td.Cmd)
}

// TestRepeatedIDDisagreeing: a list naming one ID twice with different health counts the
// device once, as unhealthy, whether the sets are rebuilt or updated in place.
func TestRepeatedIDDisagreeing(t *testing.T) {
	healthy := func(id string) *pluginapi.Device { return &pluginapi.Device{ID: id, Health: pluginapi.Healthy} }
	sick := func(id string) *pluginapi.Device { return &pluginapi.Device{ID: id, Health: pluginapi.Unhealthy} }
	for _, prior := range [][]*pluginapi.Device{nil, {healthy("a"), healthy("b"), healthy("c")}} {
		s := New(Options{})
		s.Connect("r")
		if prior != nil {
			s.ApplyDeviceList("r", prior)
		}
		s.ApplyDeviceList("r", []*pluginapi.Device{healthy("a"), sick("a"), healthy("b")})
		if !s.Healthy("r").Equal(sets.New("b")) || !s.Unhealthy("r").Equal(sets.New("a")) {
			t.Errorf("prior %d devices: healthy %v unhealthy %v, want [b] [a]", len(prior), sets.List(s.Healthy("r")), sets.List(s.Unhealthy("r")))
		}
		counts, _ := capacityCounts(s, origin, time.Minute)
		if counts["r"] != (Counts{Capacity: 2, Allocatable: 1}) {
			t.Errorf("prior %d devices: counts %+v, want 2/1", len(prior), counts["r"])
		}
	}
}

func deviceList(a args) ([]*pluginapi.Device, error) {
	unhealthy := sets.New(a.list("unhealthy")...)
	numa := map[string][]int64{}
	for _, p := range a.list("numa") {
		id, node, ok := strings.Cut(p, ":")
		n, err := strconv.ParseInt(node, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("numa %q: want id:node", p)
		}
		numa[id] = append(numa[id], n)
	}
	var devs []*pluginapi.Device
	for _, id := range a.list("devices") {
		d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
		if unhealthy.Has(id) {
			d.Health = pluginapi.Unhealthy
		}
		if nodes := numa[id]; len(nodes) > 0 {
			d.Topology = &pluginapi.TopologyInfo{}
			for _, n := range nodes {
				d.Topology.Nodes = append(d.Topology.Nodes, &pluginapi.NUMANode{ID: n})
			}
		}
		devs = append(devs, d)
	}
	return devs, nil
}

func request(a args) (Request, PreferredFunc, error) {
	n, err := strconv.Atoi(a["n"])
	if err != nil {
		return Request{}, nil, fmt.Errorf("n: %w", err)
	}
	req := Request{PodUID: a["pod"], Container: a["ctr"], Resource: a["res"], Required: n,
		Reusable: sets.New(a.list("reuse")...), SourcesReady: a.has("ready")}
	if a.has("hint") {
		req.Hint.NUMANodes = []int{}
		for _, s := range a.list("hint") {
			i, err := strconv.Atoi(s)
			if err != nil {
				return Request{}, nil, err
			}
			req.Hint.NUMANodes = append(req.Hint.NUMANodes, i)
		}
	}
	if !a.has("prefer") && !a.has("prefer-error") {
		return req, nil, nil // a plugin without GetPreferredAllocation
	}
	prefer := func(_, _ sets.Set[string], _ int) (sets.Set[string], error) {
		if a.has("prefer-error") {
			return nil, errors.New("device plugin GetPreferredAllocation rpc failed")
		}
		return sets.New(a.list("prefer")...), nil
	}
	return req, prefer, nil
}

func selection(ids sets.Set[string], outcome Outcome, err error) string {
	switch {
	case err != nil:
		return "error: " + err.Error() + "\n"
	case outcome == Cached:
		return "cached: nothing to allocate\n"
	case outcome == KeptRunning:
		return "kept: running at start, no check\n"
	}
	return fmt.Sprintf("picked %v\n", sets.List(ids))
}

func snapshot(s *State) string {
	snap := s.Prepared().Data()
	var b strings.Builder
	for _, e := range snap.PodDeviceEntries {
		fmt.Fprintf(&b, "entry %s/%s %s %v\n", e.PodUID, e.ContainerName, e.ResourceName, e.DeviceIDs)
	}
	for _, r := range SortedKeys(snap.RegisteredDevices) {
		fmt.Fprintf(&b, "registered %s %v\n", r, snap.RegisteredDevices[r])
	}
	if b.Len() == 0 {
		return "empty\n"
	}
	return b.String()
}

func dump(s *State) string {
	var b strings.Builder
	for _, r := range s.Names() {
		p := s.Plugin(r)
		plugin := "none"
		switch {
		case p.Connected && p.Listed:
			plugin = "connected"
		case p.Connected:
			plugin = "connected, no list yet"
		case p.Known:
			plugin = "away since " + p.StoppedAt.Sub(origin).String()
		}
		fmt.Fprintf(&b, "%s: plugin %s; healthy %v unhealthy %v allocated %v reserved %d\n", r, plugin,
			sets.List(s.Healthy(r)), sets.List(s.Unhealthy(r)), sets.List(s.Allocated(r)), s.pending[r].Len())
	}
	s.EachAllocation(func(pod, ctr, r string, a *Allocation) {
		fmt.Fprintf(&b, "%s/%s %s %v\n", pod, ctr, r, sets.List(a.IDs()))
	})
	for _, pod := range SortedKeys(s.reuse) {
		for _, r := range SortedKeys(s.reuse[pod]) {
			fmt.Fprintf(&b, "reuse %s %s %v\n", pod, r, sets.List(s.reuse[pod][r]))
		}
	}
	if b.Len() == 0 {
		return "empty\n"
	}
	return b.String()
}

// TestDropConflictingEntries: a device named by entries of two pods is given to neither; one
// named by two containers of one pod (an init container's device reused by its app
// container) is kept.
func TestDropConflictingEntries(t *testing.T) {
	entry := func(pod, ctr, res string, ids ...string) checkpoint.PodDevicesEntry {
		return checkpoint.PodDevicesEntry{PodUID: pod, ContainerName: ctr, ResourceName: res, DeviceIDs: checkpoint.DevicesPerNUMA{NoTopology: ids}}
	}
	keep, conflicts := DropConflictingEntries([]checkpoint.PodDevicesEntry{
		entry("p1", "init", "r", "a", "b"),
		entry("p1", "app", "r", "a"),
		entry("p2", "app", "r", "c"),
		entry("p3", "app", "r", "c", "d"),
		entry("p3", "app", "other", "a"),
	})
	name := func(es []checkpoint.PodDevicesEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.PodUID+"/"+e.ContainerName+"/"+e.ResourceName)
		}
		return out
	}
	if got := strings.Join(name(keep), " "); got != "p1/init/r p1/app/r p3/app/other" {
		t.Errorf("kept %s", got)
	}
	if got := strings.Join(name(conflicts), " "); got != "p2/app/r p3/app/r" {
		t.Errorf("dropped %s", got)
	}
}

// TestRestoreSkippedEntryHoldsNothing restores a resource's only entry with an answer that does
// not decode: the entry is skipped, and the resource is not among those with allocations, so
// that (with Options.KnowAssignedResources) no placeholder is made for it.
func TestRestoreSkippedEntryHoldsNothing(t *testing.T) {
	s := New(Options{KnowAssignedResources: true})
	bad := s.Restore(&checkpoint.Data{PodDeviceEntries: []checkpoint.PodDevicesEntry{
		{PodUID: "a", ContainerName: "c", ResourceName: "example.com/gpu",
			DeviceIDs: checkpoint.DevicesPerNUMA{NoTopology: {"g0"}}, AllocResp: []byte{}},
		{PodUID: "b", ContainerName: "c", ResourceName: "example.com/bad",
			DeviceIDs: checkpoint.DevicesPerNUMA{NoTopology: {"x0"}}, AllocResp: []byte{0xff}},
	}}, nil, origin)
	if len(bad) != 1 || bad[0].ResourceName != "example.com/bad" {
		t.Fatalf("skipped %v, want the example.com/bad entry", bad)
	}
	if got := s.AllocatedResources(); !reflect.DeepEqual(got, []string{"example.com/gpu"}) {
		t.Errorf("resources with allocations: %v, want only example.com/gpu", got)
	}
	if got := s.Listed(); !reflect.DeepEqual(got, []string{"example.com/gpu"}) {
		t.Errorf("known resources: %v, want only example.com/gpu", got)
	}
}

// TestRestoreReadKeepsEntries checks which read Entries Restore keeps as the state's own:
// those the state writes back as they were read, and no others, so that the next file still
// holds what the state's own entries would write (a null DeviceIDs as {}, an empty device
// list as null, a null AllocResp as "").
func TestRestoreReadKeepsEntries(t *testing.T) {
	entry := func(pod string, devs checkpoint.DevicesPerNUMA, resp []byte) checkpoint.PodDevicesEntry {
		return checkpoint.PodDevicesEntry{PodUID: pod, ContainerName: "c", ResourceName: "example.com/gpu", DeviceIDs: devs, AllocResp: resp}
	}
	data := &checkpoint.Data{PodDeviceEntries: []checkpoint.PodDevicesEntry{
		entry("a", checkpoint.DevicesPerNUMA{0: {"g0"}, 1: {"g1"}}, []byte{}),
		entry("b", nil, []byte{}),
		entry("c", checkpoint.DevicesPerNUMA{0: {}}, []byte{}),
		entry("d", checkpoint.DevicesPerNUMA{0: {"g2"}}, nil),
		entry("e", checkpoint.DevicesPerNUMA{0: {"g3"}}, []byte{}),
	}}
	read := make([]*checkpoint.Entry, len(data.PodDeviceEntries))
	for i, e := range data.PodDeviceEntries {
		read[i] = checkpoint.NewEntry(e)
	}
	s := New(Options{})
	if bad := s.Restore(data, read, origin); len(bad) > 0 {
		t.Fatalf("skipped %v", bad)
	}
	kept := map[string]bool{}
	got := s.Prepared().Entries
	for _, e := range got {
		for _, r := range read {
			if e == r {
				kept[e.PodUID] = true
			}
		}
	}
	if want := map[string]bool{"a": true, "e": true}; !reflect.DeepEqual(kept, want) {
		t.Errorf("kept the read entries of pods %v, want %v", kept, want)
	}
	own := New(Options{})
	own.Restore(data, nil, origin)
	if !reflect.DeepEqual(s.Prepared().Data(), own.Prepared().Data()) {
		t.Errorf("restored from read entries:\n%#v\nfrom the data alone:\n%#v", s.Prepared().Data(), own.Prepared().Data())
	}
}

// TestRestoreOrdersEntries: the restored state writes a checkpoint's entries in the file's
// order, whatever it is, one per container and resource (of two entries for one, the later is
// restored, in its own place), and skipped entries are left out.
func TestRestoreOrdersEntries(t *testing.T) {
	entry := func(pod, res, dev string, resp []byte) checkpoint.PodDevicesEntry {
		return checkpoint.PodDevicesEntry{PodUID: pod, ContainerName: "c", ResourceName: res,
			DeviceIDs: checkpoint.DevicesPerNUMA{0: {dev}}, AllocResp: resp}
	}
	ok, bad := []byte{}, []byte{0xff}
	for _, tc := range []struct {
		name    string
		entries []checkpoint.PodDevicesEntry
		want    string // pod/resource/device of each written entry, in order
	}{
		{"sorted", []checkpoint.PodDevicesEntry{entry("a", "r1", "d0", ok), entry("a", "r2", "d1", ok), entry("b", "r1", "d2", ok)},
			"a/r1/d0 a/r2/d1 b/r1/d2"},
		{"sorted, one skipped", []checkpoint.PodDevicesEntry{entry("a", "r1", "d0", ok), entry("a", "r2", "d1", bad), entry("b", "r1", "d2", ok)},
			"a/r1/d0 b/r1/d2"},
		{"unsorted", []checkpoint.PodDevicesEntry{entry("b", "r1", "d2", ok), entry("a", "r2", "d1", ok), entry("a", "r1", "d0", ok)},
			"b/r1/d2 a/r2/d1 a/r1/d0"},
		{"one container and resource twice, in a row", []checkpoint.PodDevicesEntry{entry("a", "r1", "d0", ok), entry("a", "r1", "d9", ok), entry("b", "r1", "d2", ok)},
			"a/r1/d9 b/r1/d2"},
		{"one container and resource twice, apart", []checkpoint.PodDevicesEntry{entry("a", "r1", "d0", ok), entry("b", "r1", "d2", ok), entry("a", "r1", "d9", ok)},
			"b/r1/d2 a/r1/d9"},
		{"twice, apart, the second skipped", []checkpoint.PodDevicesEntry{entry("a", "r1", "d0", ok), entry("b", "r1", "d2", ok), entry("a", "r1", "d9", bad)},
			"a/r1/d0 b/r1/d2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := &checkpoint.Data{PodDeviceEntries: tc.entries}
			read := make([]*checkpoint.Entry, len(tc.entries))
			for i, e := range tc.entries {
				read[i] = checkpoint.NewEntry(e)
			}
			for _, restore := range []struct {
				name string
				do   func(*State)
			}{
				{"data alone", func(s *State) { s.Restore(data, nil, origin) }},
				{"with read entries", func(s *State) { s.Restore(data, read, origin) }},
			} {
				s := New(Options{})
				restore.do(s)
				var got []string
				for _, e := range s.Prepared().Entries {
					got = append(got, e.PodUID+"/"+e.ResourceName+"/"+e.DeviceIDs[0][0])
				}
				if strings.Join(got, " ") != tc.want {
					t.Errorf("%s: entries %v, want %s", restore.name, got, tc.want)
				}
			}
		})
	}
}

// TestListVersion: a resource's version moves with every list applied to it and with its
// disconnect, not with another resource's changes, and never repeats after a removal.
func TestListVersion(t *testing.T) {
	s := New(Options{})
	if v := s.ListVersion("a"); v != 0 {
		t.Fatalf("unknown resource's version %d, want 0", v)
	}
	s.Connect("a")
	s.ApplyDeviceList("a", []*pluginapi.Device{{ID: "1", Health: pluginapi.Healthy}})
	a1 := s.ListVersion("a")
	s.Connect("b")
	s.ApplyDeviceList("b", []*pluginapi.Device{{ID: "1", Health: pluginapi.Healthy}})
	if s.ListVersion("a") != a1 || a1 == 0 {
		t.Fatalf("a's version %d moved with b's list (was %d)", s.ListVersion("a"), a1)
	}
	s.ApplyDeviceList("a", []*pluginapi.Device{{ID: "1", Health: pluginapi.Unhealthy}})
	a2 := s.ListVersion("a")
	if a2 == a1 {
		t.Fatalf("a health flip left a's version at %d", a1)
	}
	s.ApplyDeviceList("a", []*pluginapi.Device{{ID: "1", Health: pluginapi.Healthy}})
	a3 := s.ListVersion("a")
	s.Disconnect("a", time.Unix(1, 0)) // its healthy device turns unhealthy
	if s.ListVersion("a") == a3 {
		t.Fatalf("a disconnect left a's version at %d", a3)
	}
	last := s.ListVersion("a")
	s.Forget("a")
	s.AddRestored("a", time.Unix(2, 0))
	if v := s.ListVersion("a"); v <= last {
		t.Fatalf("a's version after removal and return %d, want above %d", v, last)
	}
}

// capacityCounts is Capacity's counts collected in a map, and the resources it removed.
func capacityCounts(s *State, now time.Time, grace time.Duration) (map[string]Counts, []string) {
	counts := map[string]Counts{}
	removed := s.Capacity(now, grace, func(res string, c Counts) { counts[res] = c })
	return counts, removed
}

// TestFlappingHealthReusesRegisteredLists: a device whose health flaps takes the registered
// list back and forth between two values; each snapshot after the first two returns the very
// Registered of two snapshots before, so its encoding and its part of the checksum are reused.
func TestFlappingHealthReusesRegisteredLists(t *testing.T) {
	s := New(Options{})
	s.Connect("r")
	list := func(sick bool) []*pluginapi.Device {
		devs := make([]*pluginapi.Device, 100)
		for i := range devs {
			devs[i] = &pluginapi.Device{ID: fmt.Sprintf("dev-%03d", i), Health: pluginapi.Healthy}
		}
		if sick {
			devs[40].Health = pluginapi.Unhealthy
		}
		return devs
	}
	registered := func() *checkpoint.Registered {
		t.Helper()
		p := s.Prepared()
		if len(p.Registered) != 1 {
			t.Fatalf("%d registered resources, want 1", len(p.Registered))
		}
		return p.Registered[0]
	}
	var seen [2]*checkpoint.Registered
	for i := range 6 {
		s.ApplyDeviceList("r", list(i%2 == 1))
		r := registered()
		if want := 100 - i%2; len(r.IDs) != want {
			t.Fatalf("snapshot %d registers %d devices, want %d", i, len(r.IDs), want)
		}
		if i >= 2 && r != seen[i%2] {
			t.Fatalf("snapshot %d made a new registered list; the health flap's list of two snapshots before was not reused", i)
		}
		seen[i%2] = r
	}
}

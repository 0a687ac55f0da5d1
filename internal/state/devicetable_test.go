package state

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// listModel is the device-list semantics written plainly, keeping every listed device as
// sent: the reference the compact table and its in-place updates are checked against.
type listModel struct {
	all                map[string]*pluginapi.Device
	healthy, unhealthy sets.Set[string]
}

func (m *listModel) apply(devs []*pluginapi.Device) []string {
	if m.all != nil && len(m.all) == len(devs) {
		same, distinct := true, sets.New[string]()
		for _, d := range devs {
			_, ok := m.all[d.ID]
			same = same && ok
			distinct.Insert(d.ID)
		}
		if same && distinct.Len() < len(devs) {
			m.rebuild(devs)
			return sets.List(sets.KeySet(m.all))
		}
		if same {
			var changed []string
			for _, d := range devs {
				if m.all[d.ID].Health != d.Health {
					changed = append(changed, d.ID)
				}
				if d.Health == pluginapi.Healthy {
					m.unhealthy.Delete(d.ID)
					m.healthy.Insert(d.ID)
				} else {
					m.healthy.Delete(d.ID)
					m.unhealthy.Insert(d.ID)
				}
				m.all[d.ID] = d
			}
			return changed
		}
	}
	return m.rebuild(devs)
}

func (m *listModel) rebuild(devs []*pluginapi.Device) []string {
	old := m.all
	var changed []string
	m.all, m.healthy, m.unhealthy = map[string]*pluginapi.Device{}, sets.New[string](), sets.New[string]()
	for _, d := range devs {
		if _, repeated := m.all[d.ID]; !repeated {
			if prev, ok := old[d.ID]; !ok || prev.Health != d.Health {
				changed = append(changed, d.ID)
			}
		}
		m.all[d.ID] = d
		if d.Health == pluginapi.Healthy {
			m.healthy.Insert(d.ID)
		} else {
			m.unhealthy.Insert(d.ID)
		}
	}
	m.healthy = m.healthy.Difference(m.unhealthy)
	return changed
}

func (m *listModel) disconnect() {
	if m.healthy != nil {
		m.unhealthy = m.unhealthy.Union(m.healthy)
		m.healthy = sets.New[string]()
	}
}

func topologyKey(t *pluginapi.TopologyInfo) string {
	if t == nil {
		return "-"
	}
	var b strings.Builder
	for _, n := range t.Nodes {
		fmt.Fprintf(&b, "%d,", n.ID)
	}
	return "[" + b.String() + "]"
}

func randomList(rng *rand.Rand) []*pluginapi.Device {
	healths := []string{pluginapi.Healthy, pluginapi.Healthy, pluginapi.Unhealthy, "Unknown"}
	topologies := [][]int64{nil, {}, {0}, {1}, {0, 1}}
	n := rng.IntN(7)
	devs := make([]*pluginapi.Device, 0, n)
	for range n {
		d := &pluginapi.Device{ID: string(rune('a' + rng.IntN(6))), Health: healths[rng.IntN(len(healths))]}
		if nodes := topologies[rng.IntN(len(topologies))]; nodes != nil && rng.IntN(3) == 0 {
			d.Topology = &pluginapi.TopologyInfo{}
			for _, id := range nodes {
				d.Topology.Nodes = append(d.Topology.Nodes, &pluginapi.NUMANode{ID: id})
			}
		}
		devs = append(devs, d)
	}
	return devs
}

// mutate returns a copy of the list with some healths changed: a list the in-place path takes.
func mutate(rng *rand.Rand, devs []*pluginapi.Device) []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(devs))
	for _, d := range devs {
		c := &pluginapi.Device{ID: d.ID, Health: d.Health, Topology: d.Topology}
		if rng.IntN(3) == 0 {
			c.Health = []string{pluginapi.Healthy, pluginapi.Unhealthy, "Unknown"}[rng.IntN(3)]
		}
		out = append(out, c)
	}
	return out
}

// TestDeviceListMatchesModel applies random sequences of lists (new, repeated IDs, health
// flips, topologies with and without nodes), disconnects and snapshots, and compares the
// state after each step with listModel: sets, listed devices, reported changes and the
// checkpoint's registered devices.
func TestDeviceListMatchesModel(t *testing.T) { rebuildPaths(t, deviceListMatchesModel) }

func deviceListMatchesModel(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		s, m := New(Options{}), &listModel{}
		s.Connect("r")
		var last []*pluginapi.Device
		for step := 0; step < 60; step++ {
			var what string
			switch k := rng.IntN(10); {
			case k < 4:
				last, what = randomList(rng), "new list"
			case k < 8 && last != nil:
				last, what = mutate(rng, last), "same devices"
			case k == 8:
				s.Disconnect("r", origin)
				s.Connect("r")
				m.disconnect()
				what = "disconnect"
			default:
				what = "snapshot"
			}
			if what == "new list" || what == "same devices" {
				got, want := s.applyDeviceList("r", last, true), m.apply(last)
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d (%s %s): changed %v, want %v", seed, step, what, describeList(last), got, want)
				}
			}
			// Registered devices are compared at snapshots only, so that several changes
			// come between two of them, as in a burst.
			compareWithModel(t, fmt.Sprintf("seed %d step %d (%s %s)", seed, step, what, describeList(last)), s, m, what == "snapshot")
		}
	}
}

func compareWithModel(t *testing.T, at string, s *State, m *listModel, registered bool) {
	t.Helper()
	if m.all == nil {
		return
	}
	if !s.Healthy("r").Equal(m.healthy) || !s.Unhealthy("r").Equal(m.unhealthy) {
		t.Fatalf("%s: healthy %v unhealthy %v, want %v %v", at,
			sets.List(s.Healthy("r")), sets.List(s.Unhealthy("r")), sets.List(m.healthy), sets.List(m.unhealthy))
	}
	got := map[string]string{}
	for id, d := range s.Devices("r") {
		got[id] = d.Health + " " + nodesKey(d.NUMANodes)
		if d2, ok := s.Device("r", id); !ok || !cmp.Equal(d, d2) {
			t.Fatalf("%s: Device(%s) = %+v %v, Devices gives %+v", at, id, d2, ok, d)
		}
	}
	want := map[string]string{}
	for id, d := range m.all {
		want[id] = d.Health + " " + topologyKey(d.Topology)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s: listed devices (-want +got):\n%s", at, diff)
	}
	if !registered {
		return
	}
	if reg := s.Prepared().Data().RegisteredDevices["r"]; !slices.Equal(reg, sets.List(m.healthy)) {
		t.Fatalf("%s: registered %v, want %v", at, reg, sets.List(m.healthy))
	}
}

func nodesKey(nodes []int64) string {
	if nodes == nil {
		return "-"
	}
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "%d,", n)
	}
	return "[" + b.String() + "]"
}

func describeList(devs []*pluginapi.Device) string {
	var parts []string
	for _, d := range devs {
		parts = append(parts, d.ID+":"+d.Health+":"+topologyKey(d.Topology))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// decodedList builds n devices the way the endpoint decodes a message: every ID is a
// substring of one string and the devices share one array. It returns the list and the
// two allocations the state must not keep.
func decodedList(n int, health string) ([]*pluginapi.Device, *byte, *pluginapi.Device) {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "dev-%04d", i)
	}
	backing := b.String()
	array := make([]pluginapi.Device, n)
	devs := make([]*pluginapi.Device, n)
	for i := range array {
		array[i] = pluginapi.Device{ID: backing[8*i : 8*i+8], Health: health}
		devs[i] = &array[i]
	}
	return devs, unsafe.StringData(backing), &array[0]
}

// TestApplyDeviceListKeepsNoMessage checks that neither a new list nor a health flip keeps
// the decoded message (its devices or the string its IDs are cut from) reachable.
func TestApplyDeviceListKeepsNoMessage(t *testing.T) { rebuildPaths(t, applyDeviceListKeepsNoMessage) }

func applyDeviceListKeepsNoMessage(t *testing.T) {
	s := New(Options{})
	s.Connect("r")
	for _, step := range []struct{ name, health string }{
		{"first list", pluginapi.Healthy},
		{"health flip", pluginapi.Unhealthy},
	} {
		freed := make(chan string, 2)
		devs, backing, array := decodedList(1000, step.health)
		runtime.AddCleanup(backing, func(what string) { freed <- what }, "IDs")
		runtime.AddCleanup(array, func(what string) { freed <- what }, "devices")
		s.ApplyDeviceList("r", devs)
		waitFreed(t, step.name, freed, "IDs", "devices")
	}
	if s.Unhealthy("r").Len() != 1000 {
		t.Fatalf("unhealthy %d, want 1000 after the flip", s.Unhealthy("r").Len())
	}
	runtime.KeepAlive(s)
}

// rebuildPaths runs test once for each way a list is rebuilt: in one pass, and on two
// goroutines whenever the list names no ID twice, however short it is.
func rebuildPaths(t *testing.T, test func(t *testing.T)) {
	for _, path := range []struct {
		name string
		min  int
	}{{"in order", math.MaxInt}, {"concurrently", 1}} {
		t.Run(path.name, func(t *testing.T) {
			saved := concurrentRebuildMin
			concurrentRebuildMin = path.min
			t.Cleanup(func() { concurrentRebuildMin = saved })
			test(t)
		})
	}
}

// waitFreed collects garbage until every one of want has been reported on freed.
func waitFreed(t *testing.T, step string, freed <-chan string, want ...string) {
	t.Helper()
	left := sets.New(want...)
	deadline := time.NewTimer(10 * time.Second) // a bound on the collector, not a measurement
	defer deadline.Stop()
	for left.Len() > 0 {
		runtime.GC()
		select {
		case what := <-freed:
			left.Delete(what)
		case <-deadline.C:
			t.Fatalf("%s: the message's %v still reachable after it was applied", step, sets.List(left))
		}
	}
}

// TestRegisteredNotSortedAgain checks that the checkpoint's registered list is reused, not
// rebuilt, when the healthy devices come back to what they were, and follows removals and
// additions otherwise.
func TestRegisteredNotSortedAgain(t *testing.T) {
	s := New(Options{})
	s.Connect("r")
	devs, _, _ := decodedList(100, pluginapi.Healthy)
	s.ApplyDeviceList("r", devs)
	first := s.Prepared().Registered[0]

	s.Disconnect("r", origin)
	if got := s.Prepared().Data().RegisteredDevices["r"]; len(got) != 0 {
		t.Fatalf("registered %v after the disconnect, want none", got)
	}
	s.Connect("r")
	s.ApplyDeviceList("r", devs)
	if again := s.Prepared().Registered[0]; again != first {
		t.Errorf("the same list after a reconnect made a new registered list")
	}

	flipped := mutate(rand.New(rand.NewPCG(7, 7)), devs)
	s.ApplyDeviceList("r", flipped)
	if got, want := s.Prepared().Data().RegisteredDevices["r"], sets.List(s.Healthy("r")); !slices.Equal(got, want) {
		t.Errorf("after a flip: registered %v, want %v", got, want)
	}
	s.ApplyDeviceList("r", devs)
	if got, want := s.Prepared().Data().RegisteredDevices["r"], sets.List(s.Healthy("r")); !slices.Equal(got, want) || len(got) != 100 {
		t.Errorf("after flipping back: registered %d devices, want the 100 sorted", len(got))
	}
}

// TestApplyDeviceListPods: the pods it returns are PodsHolding of the IDs that are new or
// changed health (applyDeviceList collecting them always), on random lists with and without
// pods holding devices, on both rebuild paths.
func TestApplyDeviceListPods(t *testing.T) {
	rebuildPaths(t, func(t *testing.T) {
		for seed := uint64(1); seed <= 200; seed++ {
			rng := rand.New(rand.NewPCG(seed, 1))
			a, b := New(Options{}), New(Options{})
			for _, s := range []*State{a, b} {
				s.Connect("r")
			}
			for step := 0; step < 20; step++ {
				if step > 0 && rng.IntN(3) == 0 {
					// A pod takes a listed device, in both states.
					pod, id := fmt.Sprintf("p%d", rng.IntN(3)), string(rune('a'+rng.IntN(6)))
					if a.IsListed("r", id) {
						for _, s := range []*State{a, b} {
							s.Commit(pod, "c", "r", sets.New(id), checkpoint.DevicesPerNUMA{NoTopology: {id}}, &pluginapi.ContainerAllocateResponse{})
						}
					}
				}
				devs := randomList(rng)
				want := a.PodsHolding("r", a.applyDeviceList("r", devs, true))
				if got := b.ApplyDeviceList("r", devs); !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d: pods %v, want %v", seed, step, got, want)
				}
				if !a.Healthy("r").Equal(b.Healthy("r")) || !a.Unhealthy("r").Equal(b.Unhealthy("r")) {
					t.Fatalf("seed %d step %d: the two states differ", seed, step)
				}
			}
		}
	})
}

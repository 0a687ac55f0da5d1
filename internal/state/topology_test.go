package state

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func numaDevice(id string, nodes ...int64) *pluginapi.Device {
	d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
	if len(nodes) > 0 {
		d.Topology = &pluginapi.TopologyInfo{}
		for _, n := range nodes {
			d.Topology.Nodes = append(d.Topology.Nodes, &pluginapi.NUMANode{ID: n})
		}
	}
	return d
}

func TestDeviceNUMANodes(t *testing.T) {
	s := New(Options{})
	machine := []int{0, 1, 2, 3}
	s.ApplyDeviceList("r", []*pluginapi.Device{numaDevice("a", 3), numaDevice("b", 1, 3), numaDevice("c"), numaDevice("d", 7)})
	if got := s.deviceNUMANodes("r", machine); fmt.Sprint(got) != "[1 3]" {
		t.Fatalf("device NUMA nodes %v, want [1 3] (no-topology ignored, unknown 7 dropped)", got)
	}
	s.ApplyDeviceList("none", []*pluginapi.Device{numaDevice("x")})
	if got := s.deviceNUMANodes("none", machine); fmt.Sprint(got) != "[0 1 2 3]" {
		t.Fatalf("no device topology: got %v, want the machine's nodes", got)
	}
}

func TestFilterByAffinity(t *testing.T) {
	s := New(Options{})
	s.ApplyDeviceList("r", []*pluginapi.Device{numaDevice("a", 0), numaDevice("b", 1), numaDevice("c", 1, 2), numaDevice("d", 2), numaDevice("e")})
	aligned, unaligned, none := s.filterByAffinity(TopologyHint{NUMANodes: []int{1}, Preferred: true}, "r", sets.New("a", "b", "c", "d", "e"))
	if !aligned.Equal(sets.New("b", "c")) || !unaligned.Equal(sets.New("a", "d")) || !none.Equal(sets.New("e")) {
		t.Fatalf("aligned %v unaligned %v none %v; want [b c] [a d] [e]", sets.List(aligned), sets.List(unaligned), sets.List(none))
	}
	s2 := New(Options{})
	s2.ApplyDeviceList("r", []*pluginapi.Device{numaDevice("a", 0)})
	aligned, unaligned, none = s2.filterByAffinity(TopologyHint{}, "r", sets.New("a"))
	if aligned.Len()+unaligned.Len() != 0 || !none.Equal(sets.New("a")) {
		t.Fatalf("without a hint every device has no affinity: %v %v %v", aligned, unaligned, none)
	}
}

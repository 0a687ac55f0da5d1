package state

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// ListedDevice is a device as its plugin last listed it: what the core keeps of it.
type ListedDevice struct {
	// Health is the health the plugin gave the device; for an ID listed more than once, its
	// last entry's.
	Health string
	// NUMANodes are the device's NUMA nodes, as listed: nil when the plugin sent no topology,
	// empty (not nil) when it sent one without nodes. Shared with the state: read only.
	NUMANodes []int64
}

// healthCode is a listed health in one byte: the two values of the API, or another string.
type healthCode uint8

const (
	healthHealthy   healthCode = iota // pluginapi.Healthy
	healthUnhealthy                   // pluginapi.Unhealthy
	healthOther                       // anything else, kept in deviceTable.otherHealth
)

func healthCodeOf(h string) healthCode {
	switch h {
	case pluginapi.Healthy:
		return healthHealthy
	case pluginapi.Unhealthy:
		return healthUnhealthy
	default:
		return healthOther
	}
}

// deviceInfo is what the core keeps per listed device, in eight bytes (a map of a million
// of them is 40 MB; one more byte would make it 68 MB).
type deviceInfo struct {
	// index is the device's position among the list's distinct IDs, for marking.
	index uint32
	// bits holds the topology's index in deviceTable.topologies above the health code's
	// two bits. A list has far fewer than 2^32 devices and 2^30 topologies: the endpoint's
	// message size limit stops it long before.
	bits uint32
}

func (i deviceInfo) health() healthCode { return healthCode(i.bits & 3) }
func (i deviceInfo) topology() uint32   { return i.bits >> 2 }

func (i deviceInfo) withHealth(h healthCode) deviceInfo {
	i.bits = i.bits&^3 | uint32(h)
	return i
}

func (i deviceInfo) withTopology(t uint32) deviceInfo {
	i.bits = t<<2 | i.bits&3
	return i
}

// topologyUse is one distinct topology of a device list and the number of its devices.
type topologyUse struct {
	nodes   []int64 // nil: no topology; empty: a topology without nodes
	devices int
}

// noTopology is the index of "no topology" in every deviceTable.topologies.
const noTopology = 0

// deviceTable is the plugin's last device list as the core keeps it: per ID its listed health
// and topology, compactly and sharing no memory with the decoded message, so that the message
// is freed once applied. Its keys are copied into one string per list; topologies are interned
// (a million devices on two NUMA nodes keep three node lists).
type deviceTable struct {
	byID map[string]deviceInfo
	// otherHealth is the listed health of the devices whose health is neither Healthy nor
	// Unhealthy.
	otherHealth map[string]string
	// topologies are the distinct topologies of the list, noTopology first. An entry whose
	// count drops to zero stays (an updated list keeps its indexes).
	topologies []topologyUse
}

func newDeviceTable(n int) *deviceTable {
	return &deviceTable{
		byID:       make(map[string]deviceInfo, n),
		topologies: []topologyUse{{}},
	}
}

// lookup returns the listed device id.
func (l *deviceTable) lookup(id string) (ListedDevice, bool) {
	if l == nil {
		return ListedDevice{}, false
	}
	info, ok := l.byID[id]
	if !ok {
		return ListedDevice{}, false
	}
	return ListedDevice{Health: l.health(id, info), NUMANodes: l.topologies[info.topology()].nodes}, true
}

// has reports whether id is listed.
func (l *deviceTable) has(id string) bool {
	if l == nil {
		return false
	}
	_, ok := l.byID[id]
	return ok
}

// health returns the listed health of the device id, whose info is info.
func (l *deviceTable) health(id string, info deviceInfo) string {
	switch info.health() {
	case healthHealthy:
		return pluginapi.Healthy
	case healthUnhealthy:
		return pluginapi.Unhealthy
	default:
		return l.otherHealth[id]
	}
}

// nodes returns the NUMA nodes of the listed device id; nil when it has no topology or is
// not listed.
func (l *deviceTable) nodes(id string) []int64 {
	if l == nil {
		return nil
	}
	return l.topologies[l.byID[id].topology()].nodes
}

// setHealth records h as the listed health of id, whose info is info, and returns the
// updated info (which the caller stores).
func (l *deviceTable) setHealth(id string, info deviceInfo, h string) deviceInfo {
	info = info.withHealth(healthCodeOf(h))
	if info.health() == healthOther {
		if l.otherHealth == nil {
			l.otherHealth = map[string]string{}
		}
		l.otherHealth[id] = strings.Clone(h)
	} else if l.otherHealth != nil {
		delete(l.otherHealth, id)
	}
	return info
}

// hasTopology reports whether any listed device names a NUMA node.
func (l *deviceTable) hasTopology() bool {
	if l == nil {
		return false
	}
	for _, t := range l.topologies {
		if t.devices > 0 && len(t.nodes) > 0 {
			return true
		}
	}
	return false
}

// isTopology reports whether topology index t is the listed topology of a device sent with
// topo.
func (l *deviceTable) isTopology(t uint32, topo *pluginapi.TopologyInfo) bool {
	nodes := l.topologies[t].nodes
	if topo == nil || nodes == nil {
		return topo == nil && nodes == nil
	}
	return sameNodes(nodes, topo.GetNodes())
}

func sameNodes(nodes []int64, listed []*pluginapi.NUMANode) bool {
	if len(nodes) != len(listed) {
		return false
	}
	for i, n := range listed {
		if nodes[i] != n.GetID() {
			return false
		}
	}
	return true
}

// topologyInterner gives each distinct topology of a list being built its index in the
// list's topologies.
type topologyInterner struct {
	l     *deviceTable
	index map[string]uint32 // node IDs, varint-encoded → index
	last  uint32            // the previous device's index: lists come grouped by node
	key   []byte
}

// intern returns the index of topo, adding it to the list's topologies if it is new, and
// counts one device for it.
func (t *topologyInterner) intern(topo *pluginapi.TopologyInfo) uint32 {
	i := t.find(topo)
	t.l.topologies[i].devices++
	return i
}

func (t *topologyInterner) find(topo *pluginapi.TopologyInfo) uint32 {
	if topo == nil {
		return noTopology
	}
	if t.last != noTopology && t.l.isTopology(t.last, topo) {
		return t.last
	}
	t.key = t.key[:0]
	for _, n := range topo.GetNodes() {
		t.key = appendVarint(t.key, n.GetID())
	}
	if i, ok := t.index[string(t.key)]; ok {
		t.last = i
		return i
	}
	nodes := make([]int64, 0, len(topo.GetNodes()))
	for _, n := range topo.GetNodes() {
		nodes = append(nodes, n.GetID())
	}
	i := uint32(len(t.l.topologies))
	t.l.topologies = append(t.l.topologies, topologyUse{nodes: nodes})
	if t.index == nil {
		t.index = map[string]uint32{}
	}
	t.index[string(t.key)] = i
	t.last = i
	return i
}

// appendVarint appends v as a zigzag varint.
func appendVarint(b []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

// deviceNUMANodes returns the sorted distinct NUMA nodes the listed devices name.
func (l *deviceTable) deviceNUMANodes() []int64 {
	if l == nil {
		return nil
	}
	nodes := sets.New[int64]()
	for _, t := range l.topologies {
		if t.devices > 0 {
			nodes.Insert(t.nodes...)
		}
	}
	out := nodes.UnsortedList()
	slices.Sort(out)
	return out
}

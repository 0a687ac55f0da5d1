package devicemanager

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/state"
)

// EndpointState says whether a resource's device plugin is connected.
type EndpointState string

// Endpoint states reported by Resources.
const (
	// EndpointRunning: the plugin is registered and its ListAndWatch stream is open.
	EndpointRunning EndpointState = "Running"
	// EndpointStopped: the plugin went away (or, for a resource restored from the checkpoint,
	// has not registered since start); the resource keeps its capacity for the grace period.
	EndpointStopped EndpointState = "Stopped"
	// EndpointNone: no endpoint, only devices that containers still hold (the resource was
	// removed after its grace period, or is known only from assignments).
	EndpointNone EndpointState = "None"
)

// Device health values reported by Resources.
const (
	DeviceHealthy   = pluginapi.Healthy
	DeviceUnhealthy = pluginapi.Unhealthy
	// DeviceUnknown: a container holds the device but no plugin lists it.
	DeviceUnknown = "Unknown"
)

// EndpointView is a snapshot of the endpoint serving one resource.
type EndpointView struct {
	State EndpointState
	// Socket is the plugin socket the endpoint dialled; empty for a placeholder restored from
	// the checkpoint and for EndpointNone.
	Socket string
	// Instance identifies the endpoint instance: it differs between two registrations of
	// the same resource that are alive at the same time. It is opaque, only for comparison.
	Instance string
	// Listed is true once this instance has sent its device list; until then the devices are
	// those of the previous instance or of the checkpoint.
	Listed bool
	// StoppedAt is when a stopped endpoint stopped (zero while running).
	StoppedAt time.Time
	// GraceRemaining is how much of the grace period a stopped endpoint has left before its
	// resource is removed (0 once expired; 0 while running).
	GraceRemaining time.Duration
}

// DeviceView is a snapshot of one device of a resource.
type DeviceView struct {
	ID string
	// Health is DeviceHealthy, DeviceUnhealthy or DeviceUnknown.
	Health string
	// NUMANodes are the device's NUMA nodes as its plugin reports them (or, for a device no
	// plugin lists, as recorded at allocation time), ascending; empty without topology.
	NUMANodes []int64
	// Holders are the containers the device is assigned to, sorted.
	Holders []ContainerKey
	// Reserved is true while an allocation in flight has picked the device.
	Reserved bool
}

// ResourceView is a read-only snapshot of one device resource: its endpoint and its devices.
type ResourceView struct {
	Name     string
	Endpoint EndpointView
	// ReplacedStreams counts earlier instances of the resource's plugin, replaced by a later
	// registration, whose ListAndWatch streams are still open (their lists are ignored).
	ReplacedStreams int
	// Devices are sorted by ID.
	Devices []DeviceView
}

// Resources returns a consistent snapshot of every resource the manager knows: registered
// ones, stopped ones within (or past) their grace period, and any whose devices containers
// still hold. It is sorted by name, changes nothing (unlike GetCapacity it removes no expired
// resource) and makes no RPC; it is safe for concurrent use and meant for status pages and
// debugging.
//
// Its cost under the manager's lock grows with the number of devices only after a device
// change, and then only by one read of each resource's device sets: views are sorted and
// built outside the lock, and a call that finds a resource's devices, holders and
// reservations as the last call left them returns the same DeviceView slice again. The
// returned views therefore share memory with other calls' and must not be modified.
func (m *Manager) Resources() []ResourceView {
	m.views.mu.Lock()
	defer m.views.mu.Unlock()
	m.mu.Lock()
	names := sets.New(m.st.Names()...)
	for res := range m.endpoints {
		names.Insert(res)
	}
	holders := m.holdersLocked()
	out := make([]ResourceView, 0, names.Len())
	reads := make([]deviceRead, 0, names.Len())
	for _, res := range sets.List(names) {
		out = append(out, ResourceView{Name: res, Endpoint: m.endpointViewLocked(res), ReplacedStreams: len(m.replaced[res])})
		reads = append(reads, m.readDevicesLocked(&m.views, res, holders[res]))
	}
	m.mu.Unlock()
	for i := range out {
		out[i].Devices = m.views.views(out[i].Name, reads[i])
	}
	m.views.forgetExcept(names)
	return out
}

// endpointViewLocked describes the resource's endpoint. Callers hold mu.
func (m *Manager) endpointViewLocked(res string) EndpointView {
	info, ok := m.endpoints[res]
	if !ok || info.ep == nil {
		return EndpointView{State: EndpointNone}
	}
	v := EndpointView{State: EndpointRunning, Socket: info.ep.SocketPath(), Instance: fmt.Sprintf("%p", info.ep),
		Listed: m.st.Plugin(res).Listed}
	if info.ep.IsStopped() {
		v.State = EndpointStopped
		v.StoppedAt = info.ep.StopTime()
		if left := m.cfg.GracePeriod - m.cfg.Clock.Since(v.StoppedAt); left > 0 {
			v.GraceRemaining = left
		}
	}
	return v
}

// deviceHolder is one container's hold on a device, with the NUMA nodes recorded for it.
type deviceHolder struct {
	key   ContainerKey
	nodes []int64
}

// holdersLocked indexes the assignments: resource → device ID → holders. Callers hold mu.
func (m *Manager) holdersLocked() map[string]map[string][]deviceHolder {
	out := map[string]map[string][]deviceHolder{}
	m.st.EachAllocation(func(podUID, container, res string, a *state.Allocation) {
		for node, ids := range a.Devices {
			for _, id := range ids {
				if out[res] == nil {
					out[res] = map[string][]deviceHolder{}
				}
				key := ContainerKey{PodUID: podUID, ContainerName: container}
				hs := out[res][id]
				i := sort.Search(len(hs), func(i int) bool { return !lessKey(hs[i].key, key) })
				if i == len(hs) || hs[i].key != key {
					hs = append(hs, deviceHolder{})
					copy(hs[i+1:], hs[i:])
					hs[i] = deviceHolder{key: key}
				}
				if node != state.NoTopology {
					hs[i].nodes = append(hs[i].nodes, node)
				}
				out[res][id] = hs
			}
		}
	})
	return out
}

func lessKey(a, b ContainerKey) bool {
	if a.PodUID != b.PodUID {
		return a.PodUID < b.PodUID
	}
	return a.ContainerName < b.ContainerName
}

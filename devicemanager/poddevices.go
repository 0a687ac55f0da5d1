package devicemanager

import (
	"sort"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
)

// noTopology is the pseudo NUMA node under which devices without topology are recorded.
const noTopology int64 = -1

// allocation is what one container holds of one resource: the device IDs per NUMA node and
// the plugin's Allocate answer for them.
type allocation struct {
	devices checkpoint.DevicesPerNUMA
	resp    *pluginapi.ContainerAllocateResponse
	raw     []byte // resp in wire form, as checkpointed; nil if it could not be marshalled
}

// ids returns the allocation's device IDs, each once.
func (a *allocation) ids() sets.Set[string] {
	s := sets.New[string]()
	for _, list := range a.devices {
		s.Insert(list...)
	}
	return s
}

// podDevices records which devices every container holds: pod UID → container → resource.
// It is the authoritative assignment state and what the checkpoint stores. It has no lock of
// its own: the ManagerImpl mutex guards it.
type podDevices map[string]map[string]map[string]*allocation

func (p podDevices) insert(podUID, container, resource string, devs checkpoint.DevicesPerNUMA, resp *pluginapi.ContainerAllocateResponse) {
	if p[podUID] == nil {
		p[podUID] = map[string]map[string]*allocation{}
	}
	if p[podUID][container] == nil {
		p[podUID][container] = map[string]*allocation{}
	}
	p[podUID][container][resource] = newAllocation(devs, resp, nil)
}

// newAllocation keeps raw as the wire form when given (restored from a checkpoint), and
// marshals resp otherwise.
func newAllocation(devs checkpoint.DevicesPerNUMA, resp *pluginapi.ContainerAllocateResponse, raw []byte) *allocation {
	a := &allocation{devices: devs, resp: resp, raw: raw}
	if a.raw == nil && resp != nil {
		if b, err := proto.Marshal(resp); err == nil {
			a.raw = b
			if a.raw == nil {
				a.raw = []byte{}
			}
		}
	}
	return a
}

func (p podDevices) hasPod(podUID string) bool {
	_, ok := p[podUID]
	return ok
}

// containerDevices returns the IDs the container holds of the resource, or nil when it holds
// no entry for it (an entry with no devices gives an empty, non-nil set).
func (p podDevices) containerDevices(podUID, container, resource string) sets.Set[string] {
	a := p[podUID][container][resource]
	if a == nil {
		return nil
	}
	return a.ids()
}

// containerAllDevices returns every device the container holds, per resource.
func (p podDevices) containerAllDevices(podUID, container string) map[string]sets.Set[string] {
	out := map[string]sets.Set[string]{}
	for res, a := range p[podUID][container] {
		out[res] = a.ids()
	}
	return out
}

// devices returns the union of all held devices per resource.
func (p podDevices) devices() map[string]sets.Set[string] {
	out := map[string]sets.Set[string]{}
	for _, containers := range p {
		for _, resources := range containers {
			for res, a := range resources {
				if out[res] == nil {
					out[res] = sets.New[string]()
				}
				for _, ids := range a.devices {
					out[res].Insert(ids...)
				}
			}
		}
	}
	return out
}

// podsHolding returns the UIDs of the pods holding any of the resource's IDs, each once, in
// pod UID order. The kubelet matches IDs across all resources; kdm matches within the
// resource, so equal IDs of two resources cannot wake the wrong pod.
func (p podDevices) podsHolding(resource string, ids []string) []string {
	if len(ids) == 0 {
		return nil
	}
	want := sets.New(ids...)
	var uids []string
	for _, podUID := range sortedKeys(p) {
	containers:
		for _, resources := range p[podUID] {
			if a := resources[resource]; a != nil {
				for _, list := range a.devices {
					for _, id := range list {
						if want.Has(id) {
							uids = append(uids, podUID)
							break containers
						}
					}
				}
			}
		}
	}
	return uids
}

// entries converts the state into checkpoint entries, sorted by pod UID, container and
// resource. Entries whose response is missing or cannot be marshalled are skipped, as the
// kubelet does.
func (p podDevices) entries() []checkpoint.PodDevicesEntry {
	var out []checkpoint.PodDevicesEntry
	for _, podUID := range sortedKeys(p) {
		for _, container := range sortedKeys(p[podUID]) {
			for _, res := range sortedKeys(p[podUID][container]) {
				a := p[podUID][container][res]
				if a.raw == nil {
					continue
				}
				b := a.raw
				out = append(out, checkpoint.PodDevicesEntry{
					PodUID: podUID, ContainerName: container, ResourceName: res,
					DeviceIDs: a.devices, AllocResp: b,
				})
			}
		}
	}
	return out
}

// restore rebuilds the state from checkpoint entries. An entry whose AllocResp is not a valid
// ContainerAllocateResponse is skipped and returned in bad.
func restorePodDevices(entries []checkpoint.PodDevicesEntry) (p podDevices, bad []checkpoint.PodDevicesEntry) {
	p = podDevices{}
	for _, e := range entries {
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
			bad = append(bad, e)
			continue
		}
		devs := checkpoint.DevicesPerNUMA{}
		for n, ids := range e.DeviceIDs {
			devs[n] = append([]string(nil), ids...)
		}
		raw := e.AllocResp
		if raw == nil {
			raw = []byte{}
		}
		if p[e.PodUID] == nil {
			p[e.PodUID] = map[string]map[string]*allocation{}
		}
		if p[e.PodUID][e.ContainerName] == nil {
			p[e.PodUID][e.ContainerName] = map[string]*allocation{}
		}
		p[e.PodUID][e.ContainerName][e.ResourceName] = newAllocation(devs, resp, raw)
	}
	return p, bad
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

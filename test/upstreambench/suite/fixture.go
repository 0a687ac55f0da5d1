package suite

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	kubeletcp "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
)

// ResourceName is the one device resource of every benchmark.
const ResourceName = "example.com/gpu"

// ContainerName is the one container of every benchmark pod.
const ContainerName = "cuda"

// DeviceID is the i-th device's ID, shaped like an NVIDIA GPU UUID.
func DeviceID(i int) string { return fmt.Sprintf("GPU-%08x-4b1e-9d7a-%012x", i, i) }

// DeviceList is n healthy devices without topology, as the plugin lists them.
func DeviceList(n int) []*pluginapi.Device {
	devs := make([]*pluginapi.Device, n)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: DeviceID(i), Health: pluginapi.Healthy}
	}
	return devs
}

// ContainerResponse is the plugin's answer for one container holding ids: an environment
// variable, an annotation, a driver mount, and per device a device node and a CDI device.
// Every manager receives it from the same plugin stub and stores it in its checkpoint.
func ContainerResponse(ids []string) *pluginapi.ContainerAllocateResponse {
	joined := strings.Join(ids, ",")
	r := &pluginapi.ContainerAllocateResponse{
		Envs:        map[string]string{"EXAMPLE_VISIBLE_DEVICES": joined},
		Annotations: map[string]string{"example.com/devices": joined},
		Mounts:      []*pluginapi.Mount{{ContainerPath: "/usr/local/example", HostPath: "/run/example/driver", ReadOnly: true}},
	}
	for _, id := range ids {
		node := "/dev/example-" + id
		r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: node, HostPath: node, Permissions: "rw"})
		r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: ResourceName + "=" + id})
	}
	return r
}

// allocate is the plugin stub's Allocate: one ContainerResponse per container request.
func allocate(r *pluginapi.AllocateRequest, _ map[string]*pluginapi.Device) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range r.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, ContainerResponse(cr.DevicesIds))
	}
	return resp, nil
}

// PodUID is the i-th pod's UID: a version 4 UUID, as the API server gives pods, drawn from a
// generator seeded with i. UIDs do not sort in the order pods arrive.
func PodUID(i int) string {
	r := rand.New(rand.NewPCG(uint64(i), 0x6f1c2b7e))
	a, b := r.Uint64(), r.Uint64()
	return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", a>>32, a>>16&0xffff, a&0xfff, 0x8000|b>>48&0x3fff, b&0xffffffffffff)
}

// NewPod is the i-th pod, whose one container asks for devices devices of ResourceName.
func NewPod(i, devices int) *v1.Pod {
	q := *resource.NewQuantity(int64(devices), resource.DecimalSI)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: "bench", UID: types.UID(PodUID(i))},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name:      ContainerName,
			Image:     "example.com/cuda:12",
			Resources: v1.ResourceRequirements{Limits: v1.ResourceList{ResourceName: q}, Requests: v1.ResourceList{ResourceName: q}},
		}}},
	}
}

// Checkpoint is what a device manager's checkpoint holds, in neither manager's types: each
// side converts it to its own (the kubelet's with Kubelet).
type Checkpoint struct {
	Entries []Entry
	// Registered lists the healthy device IDs per resource.
	Registered map[string][]string
}

// Entry is one (pod, container, resource) assignment of a Checkpoint.
type Entry struct {
	PodUID, ContainerName, ResourceName string
	// DeviceIDs are the devices per NUMA node; -1 is the kubelet's "no topology".
	DeviceIDs map[int64][]string
	// AllocResp is the plugin's ContainerAllocateResponse in protobuf wire bytes.
	AllocResp []byte
}

// CheckpointData is pods pods, each holding perPod consecutive devices: the state the
// kubelet writes after admitting them. Devices are split over NUMA nodes 0 and 1 when numa
// is set (a GPU server's checkpoint) and recorded under -1 otherwise (what the plugin stub's
// devices produce). Registered lists the first registered devices.
func CheckpointData(tb testing.TB, pods, perPod, registered int, numa bool) *Checkpoint {
	tb.Helper()
	d := &Checkpoint{Registered: map[string][]string{ResourceName: {}}}
	for i := 0; i < registered; i++ {
		d.Registered[ResourceName] = append(d.Registered[ResourceName], DeviceID(i))
	}
	for p := 0; p < pods; p++ {
		ids := make([]string, perPod)
		for i := range ids {
			ids[i] = DeviceID(p*perPod + i)
		}
		resp, err := proto.Marshal(ContainerResponse(ids))
		if err != nil {
			tb.Fatal(err)
		}
		perNUMA := map[int64][]string{-1: ids}
		if numa {
			perNUMA = map[int64][]string{0: ids[:perPod/2], 1: ids[perPod/2:]}
		}
		d.Entries = append(d.Entries, Entry{PodUID: PodUID(p), ContainerName: ContainerName, ResourceName: ResourceName, DeviceIDs: perNUMA, AllocResp: resp})
	}
	return d
}

// Kubelet is d in the kubelet's own checkpoint types, built afresh as the kubelet rebuilds
// its checkpoint data from its pod devices before every write.
func (d *Checkpoint) Kubelet() kubeletcp.DeviceManagerCheckpoint {
	entries := make([]kubeletcp.PodDevicesEntry, len(d.Entries))
	for i, e := range d.Entries {
		ids := kubeletcp.NewDevicesPerNUMA()
		for node, devs := range e.DeviceIDs {
			ids[node] = devs
		}
		entries[i] = kubeletcp.PodDevicesEntry{PodUID: e.PodUID, ContainerName: e.ContainerName, ResourceName: e.ResourceName, DeviceIDs: ids, AllocResp: e.AllocResp}
	}
	return kubeletcp.New(entries, d.Registered)
}

// PodList is the pod source of every manager: the active pods, safe for concurrent use.
type PodList struct {
	mu    sync.Mutex
	pods  []*v1.Pod
	index map[types.UID]int
}

// NewPodList is an empty pod source.
func NewPodList() *PodList { return &PodList{index: map[types.UID]int{}} }

// Add makes p active.
func (l *PodList) Add(p *v1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index[p.UID] = len(l.pods)
	l.pods = append(l.pods, p)
}

// Remove makes the pod uid inactive, as when it has terminated.
func (l *PodList) Remove(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, ok := l.index[uid]
	if !ok {
		return
	}
	last := len(l.pods) - 1
	l.pods[i] = l.pods[last]
	l.index[l.pods[i].UID] = i
	l.pods = l.pods[:last]
	delete(l.index, uid)
}

// Active returns a copy of the list, as the kubelet's pod manager does.
func (l *PodList) Active() []*v1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*v1.Pod(nil), l.pods...)
}

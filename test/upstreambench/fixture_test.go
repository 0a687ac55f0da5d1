package upstreambench

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

	"github.com/kdm-project/kdm/checkpoint"
)

// resourceName is the one device resource of every benchmark.
const resourceName = "example.com/gpu"

// containerName is the one container of every benchmark pod.
const containerName = "cuda"

// deviceID is the i-th device's ID, shaped like an NVIDIA GPU UUID.
func deviceID(i int) string { return fmt.Sprintf("GPU-%08x-4b1e-9d7a-%012x", i, i) }

// deviceList is n healthy devices without topology, as the plugin lists them.
func deviceList(n int) []*pluginapi.Device {
	devs := make([]*pluginapi.Device, n)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: deviceID(i), Health: pluginapi.Healthy}
	}
	return devs
}

// containerResponse is the plugin's answer for one container holding ids: an environment
// variable, an annotation, a driver mount, and per device a device node and a CDI device.
// Both managers receive it from the same plugin stub and store it in their checkpoints.
func containerResponse(ids []string) *pluginapi.ContainerAllocateResponse {
	joined := strings.Join(ids, ",")
	r := &pluginapi.ContainerAllocateResponse{
		Envs:        map[string]string{"EXAMPLE_VISIBLE_DEVICES": joined},
		Annotations: map[string]string{"example.com/devices": joined},
		Mounts:      []*pluginapi.Mount{{ContainerPath: "/usr/local/example", HostPath: "/run/example/driver", ReadOnly: true}},
	}
	for _, id := range ids {
		node := "/dev/example-" + id
		r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: node, HostPath: node, Permissions: "rw"})
		r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: resourceName + "=" + id})
	}
	return r
}

// allocate is the plugin stub's Allocate: one containerResponse per container request.
func allocate(r *pluginapi.AllocateRequest, _ map[string]*pluginapi.Device) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range r.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, containerResponse(cr.DevicesIds))
	}
	return resp, nil
}

// podUID is the i-th pod's UID: a version 4 UUID, as the API server gives pods, drawn from a
// generator seeded with i. UIDs do not sort in the order pods arrive.
func podUID(i int) string {
	r := rand.New(rand.NewPCG(uint64(i), 0x6f1c2b7e))
	a, b := r.Uint64(), r.Uint64()
	return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", a>>32, a>>16&0xffff, a&0xfff, 0x8000|b>>48&0x3fff, b&0xffffffffffff)
}

// newPod is a pod whose one container asks for devices devices of resourceName.
func newPod(i, devices int) *v1.Pod {
	q := *resource.NewQuantity(int64(devices), resource.DecimalSI)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: "bench", UID: types.UID(podUID(i))},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name:      containerName,
			Image:     "example.com/cuda:12",
			Resources: v1.ResourceRequirements{Limits: v1.ResourceList{resourceName: q}, Requests: v1.ResourceList{resourceName: q}},
		}}},
	}
}

// checkpointData is pods pods, each holding perPod consecutive devices: the state the
// kubelet writes after admitting them. Devices are split over NUMA nodes 0 and 1 when numa
// is set (a GPU server's checkpoint) and recorded under -1, the kubelet's "no topology",
// otherwise (what the plugin stub's devices produce). RegisteredDevices lists the devices
// of registered, the healthy devices of the resource.
func checkpointData(tb testing.TB, pods, perPod, registered int, numa bool) *checkpoint.Data {
	tb.Helper()
	d := &checkpoint.Data{RegisteredDevices: map[string][]string{resourceName: {}}}
	for i := 0; i < registered; i++ {
		d.RegisteredDevices[resourceName] = append(d.RegisteredDevices[resourceName], deviceID(i))
	}
	for p := 0; p < pods; p++ {
		ids := make([]string, perPod)
		for i := range ids {
			ids[i] = deviceID(p*perPod + i)
		}
		resp, err := proto.Marshal(containerResponse(ids))
		if err != nil {
			tb.Fatal(err)
		}
		perNUMA := checkpoint.DevicesPerNUMA{-1: ids}
		if numa {
			perNUMA = checkpoint.DevicesPerNUMA{0: ids[:perPod/2], 1: ids[perPod/2:]}
		}
		d.PodDeviceEntries = append(d.PodDeviceEntries, checkpoint.PodDevicesEntry{
			PodUID: podUID(p), ContainerName: containerName, ResourceName: resourceName, DeviceIDs: perNUMA, AllocResp: resp,
		})
	}
	return d
}

// kubeletCheckpoint is d in the kubelet's own checkpoint types.
func kubeletCheckpoint(d *checkpoint.Data) kubeletcp.DeviceManagerCheckpoint {
	entries := make([]kubeletcp.PodDevicesEntry, len(d.PodDeviceEntries))
	for i, e := range d.PodDeviceEntries {
		ids := kubeletcp.NewDevicesPerNUMA()
		for node, devs := range e.DeviceIDs {
			ids[node] = devs
		}
		entries[i] = kubeletcp.PodDevicesEntry{PodUID: e.PodUID, ContainerName: e.ContainerName, ResourceName: e.ResourceName, DeviceIDs: ids, AllocResp: e.AllocResp}
	}
	return kubeletcp.New(entries, d.RegisteredDevices)
}

// podList is the pod source of both managers: the active pods, safe for concurrent use.
type podList struct {
	mu    sync.Mutex
	pods  []*v1.Pod
	index map[types.UID]int
}

func newPodList() *podList { return &podList{index: map[types.UID]int{}} }

func (l *podList) add(p *v1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index[p.UID] = len(l.pods)
	l.pods = append(l.pods, p)
}

func (l *podList) remove(uid types.UID) {
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

// active returns a copy of the list, as the kubelet's pod manager does.
func (l *podList) active() []*v1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*v1.Pod(nil), l.pods...)
}

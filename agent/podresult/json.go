package podresult

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
)

// The JSON form of a pod result, as written to <root-dir>/kdm/pods/*.json and served in
// /status. docs/pod-results.md documents it; TestPodResultGolden keeps it stable. Every key is
// camelCase, the file names its schema (apiVersion, kind), a container's devices are listed
// once each with their NUMA nodes, and the plugin's Allocate answer is plain JSON.
//
// Results written before the schema had a version (no apiVersion: Go field names in
// runOptions, device IDs keyed by NUMA node, the Allocate answer as base64 protobuf) are still
// read, so that a kdm upgraded in place recovers from the files its predecessor left.

// Identification of the pod result schema.
const (
	APIVersion = "kdm.io/v1"
	Kind       = "PodResult"
)

// noTopology is the NUMA node the checkpoint files a device under when its plugin reports no
// topology (the kubelet's convention).
const noTopology = -1

// podResultFields is PodResult without its JSON methods.
type podResultFields PodResult

// MarshalJSON writes the result in the kdm.io/v1 schema, starting with its apiVersion and
// kind.
func (r PodResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		podResultFields
	}{APIVersion, Kind, podResultFields(r)})
}

// UnmarshalJSON reads a result of the kdm.io/v1 schema, or one written before the schema had a
// version. Other versions and kinds are an error.
func (r *PodResult) UnmarshalJSON(data []byte) error {
	var head struct {
		APIVersion *string `json:"apiVersion"`
		Kind       string  `json:"kind"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return err
	}
	switch {
	case head.APIVersion == nil:
		var old unversionedPodResult
		if err := json.Unmarshal(data, &old); err != nil {
			return fmt.Errorf("unversioned pod result: %w", err)
		}
		*r = old.convert()
		return nil
	case *head.APIVersion != APIVersion:
		return fmt.Errorf("pod result of apiVersion %q: this kdm reads %s and unversioned results", *head.APIVersion, APIVersion)
	case head.Kind != Kind:
		return fmt.Errorf("%s object of kind %q, want %s", APIVersion, head.Kind, Kind)
	}
	var f podResultFields
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	*r = PodResult(f)
	return nil
}

// containerJSON is ContainerResult in the kdm.io/v1 schema.
type containerJSON struct {
	Name                     string              `json:"name"`
	Init                     bool                `json:"init,omitempty"`
	Sidecar                  bool                `json:"sidecar,omitempty"`
	RunOptions               *runOptionsJSON     `json:"runOptions,omitempty"`
	AllocatedResourcesStatus []v1.ResourceStatus `json:"allocatedResourcesStatus,omitempty"`
	Requests                 map[string]int64    `json:"requests,omitempty"`
	Allocations              []Allocation        `json:"allocations,omitempty"`
}

// runOptionsJSON is devicemanager.RunContainerOptions in the kdm.io/v1 schema: what the
// container runtime is given, merged over the container's resources.
type runOptionsJSON struct {
	Envs        []nameValueJSON  `json:"envs,omitempty"`
	Mounts      []mountJSON      `json:"mounts,omitempty"`
	Devices     []deviceNodeJSON `json:"devices,omitempty"`
	Annotations []nameValueJSON  `json:"annotations,omitempty"`
	CDIDevices  []cdiDeviceJSON  `json:"cdiDevices,omitempty"`
}

type nameValueJSON struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type mountJSON struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly,omitempty"`
}

type deviceNodeJSON struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	Permissions   string `json:"permissions,omitempty"`
}

type cdiDeviceJSON struct {
	Name string `json:"name"`
}

// MarshalJSON writes the container in the kdm.io/v1 schema.
func (c ContainerResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(containerJSON{Name: c.Name, Init: c.Init, Sidecar: c.Sidecar,
		RunOptions: runOptionsToJSON(c.RunOptions), AllocatedResourcesStatus: c.AllocatedResourcesStatus,
		Requests: c.Requests, Allocations: c.Allocations})
}

// UnmarshalJSON reads a container of the kdm.io/v1 schema.
func (c *ContainerResult) UnmarshalJSON(data []byte) error {
	var j containerJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*c = ContainerResult{Name: j.Name, Init: j.Init, Sidecar: j.Sidecar, RunOptions: j.RunOptions.toRunOptions(),
		AllocatedResourcesStatus: j.AllocatedResourcesStatus, Requests: j.Requests, Allocations: j.Allocations}
	return nil
}

func runOptionsToJSON(o *devicemanager.RunContainerOptions) *runOptionsJSON {
	if o == nil {
		return nil
	}
	j := &runOptionsJSON{}
	for _, e := range o.Envs {
		j.Envs = append(j.Envs, nameValueJSON{e.Name, e.Value})
	}
	for _, m := range o.Mounts {
		j.Mounts = append(j.Mounts, mountJSON{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range o.Devices {
		j.Devices = append(j.Devices, deviceNodeJSON{ContainerPath: d.PathInContainer, HostPath: d.PathOnHost, Permissions: d.Permissions})
	}
	for _, a := range o.Annotations {
		j.Annotations = append(j.Annotations, nameValueJSON{a.Name, a.Value})
	}
	for _, d := range o.CDIDevices {
		j.CDIDevices = append(j.CDIDevices, cdiDeviceJSON{d.Name})
	}
	return j
}

func (j *runOptionsJSON) toRunOptions() *devicemanager.RunContainerOptions {
	if j == nil {
		return nil
	}
	o := &devicemanager.RunContainerOptions{}
	for _, e := range j.Envs {
		o.Envs = append(o.Envs, devicemanager.EnvVar{Name: e.Name, Value: e.Value})
	}
	for _, m := range j.Mounts {
		// A mount is named by its container path (devicemanager.Mount).
		o.Mounts = append(o.Mounts, devicemanager.Mount{Name: m.ContainerPath, ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range j.Devices {
		o.Devices = append(o.Devices, devicemanager.DeviceInfo{PathOnHost: d.HostPath, PathInContainer: d.ContainerPath, Permissions: d.Permissions})
	}
	for _, a := range j.Annotations {
		o.Annotations = append(o.Annotations, devicemanager.Annotation{Name: a.Name, Value: a.Value})
	}
	for _, d := range j.CDIDevices {
		o.CDIDevices = append(o.CDIDevices, devicemanager.CDIDevice{Name: d.Name})
	}
	return o
}

// allocationJSON is Allocation in the kdm.io/v1 schema.
type allocationJSON struct {
	Resource string `json:"resource"`
	// Devices are listed once each, sorted by ID.
	Devices []allocatedDeviceJSON `json:"devices"`
	// AllocateResponse is absent when the checkpoint held no answer for these devices.
	AllocateResponse *allocateResponseJSON `json:"allocateResponse,omitempty"`
}

// allocatedDeviceJSON is one device with the NUMA nodes recorded when it was allocated; none
// when its plugin reported no topology.
type allocatedDeviceJSON struct {
	ID        string  `json:"id"`
	NUMANodes []int64 `json:"numaNodes,omitempty"`
}

// allocateResponseJSON is the plugin's ContainerAllocateResponse.
type allocateResponseJSON struct {
	Envs        map[string]string `json:"envs,omitempty"`
	Mounts      []mountJSON       `json:"mounts,omitempty"`
	Devices     []deviceNodeJSON  `json:"devices,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	CDIDevices  []cdiDeviceJSON   `json:"cdiDevices,omitempty"`
}

// MarshalJSON writes the allocation in the kdm.io/v1 schema. An answer that does not decode,
// which the device manager never keeps, is left out.
func (a Allocation) MarshalJSON() ([]byte, error) {
	j := allocationJSON{Resource: a.Resource, Devices: devicesToJSON(a.DeviceIDs)}
	if a.AllocResp != nil {
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(a.AllocResp, resp); err == nil {
			j.AllocateResponse = allocateResponseToJSON(resp)
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads an allocation of the kdm.io/v1 schema. The Allocate answer becomes
// protobuf again, as the checkpoint holds it.
func (a *Allocation) UnmarshalJSON(data []byte) error {
	var j allocationJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*a = Allocation{Resource: j.Resource, DeviceIDs: devicesFromJSON(j.Devices)}
	if j.AllocateResponse != nil {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(j.AllocateResponse.toProto())
		if err != nil {
			return fmt.Errorf("allocation of %s: encoding its Allocate answer: %w", j.Resource, err)
		}
		if b == nil {
			b = []byte{}
		}
		a.AllocResp = b
	}
	return nil
}

// devicesToJSON lists each device once, sorted by ID, with the NUMA nodes it is filed under;
// the checkpoint's "no topology" node is left out, except beside real nodes, where only a
// hand-made record puts it.
func devicesToJSON(per checkpoint.DevicesPerNUMA) []allocatedDeviceJSON {
	nodes := map[string][]int64{}
	for node, ids := range per {
		for _, id := range ids {
			if !slices.Contains(nodes[id], node) {
				nodes[id] = append(nodes[id], node)
			}
		}
	}
	out := make([]allocatedDeviceJSON, 0, len(nodes))
	for id, ns := range nodes {
		slices.Sort(ns)
		if len(ns) == 1 && ns[0] == noTopology {
			ns = nil
		}
		out = append(out, allocatedDeviceJSON{ID: id, NUMANodes: ns})
	}
	slices.SortFunc(out, func(x, y allocatedDeviceJSON) int { return strings.Compare(x.ID, y.ID) })
	return out
}

// devicesFromJSON files each device under its NUMA nodes, or under the "no topology" node.
func devicesFromJSON(devs []allocatedDeviceJSON) checkpoint.DevicesPerNUMA {
	per := checkpoint.DevicesPerNUMA{}
	for _, d := range devs {
		if len(d.NUMANodes) == 0 {
			per[noTopology] = append(per[noTopology], d.ID)
			continue
		}
		for _, n := range d.NUMANodes {
			if !slices.Contains(per[n], d.ID) {
				per[n] = append(per[n], d.ID)
			}
		}
	}
	return per
}

func allocateResponseToJSON(r *pluginapi.ContainerAllocateResponse) *allocateResponseJSON {
	j := &allocateResponseJSON{Envs: r.Envs, Annotations: r.Annotations}
	for _, m := range r.Mounts {
		j.Mounts = append(j.Mounts, mountJSON{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range r.Devices {
		j.Devices = append(j.Devices, deviceNodeJSON{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	for _, d := range r.CdiDevices {
		j.CDIDevices = append(j.CDIDevices, cdiDeviceJSON{d.Name})
	}
	return j
}

func (j *allocateResponseJSON) toProto() *pluginapi.ContainerAllocateResponse {
	r := &pluginapi.ContainerAllocateResponse{Envs: j.Envs, Annotations: j.Annotations}
	for _, m := range j.Mounts {
		r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range j.Devices {
		r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	for _, d := range j.CDIDevices {
		r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: d.Name})
	}
	return r
}

// unversionedPodResult is a result written before the schema had a version: the same keys,
// except in each container's runOptions and allocations.
type unversionedPodResult struct {
	podResultFields
	Containers []unversionedContainer `json:"containers,omitempty"`
}

type unversionedContainer struct {
	Name    string `json:"name"`
	Init    bool   `json:"init,omitempty"`
	Sidecar bool   `json:"sidecar,omitempty"`
	// RunOptions was written with Go's field names (Envs, PathOnHost, ...), which are the
	// struct's own.
	RunOptions               *devicemanager.RunContainerOptions `json:"runOptions,omitempty"`
	AllocatedResourcesStatus []v1.ResourceStatus                `json:"allocatedResourcesStatus,omitempty"`
	Requests                 map[string]int64                   `json:"requests,omitempty"`
	Allocations              []unversionedAllocation            `json:"allocations,omitempty"`
}

// unversionedAllocation holds the devices keyed by NUMA node ("-1": no topology) and the
// Allocate answer as base64 protobuf, as the checkpoint does.
type unversionedAllocation struct {
	Resource  string                    `json:"resource"`
	DeviceIDs checkpoint.DevicesPerNUMA `json:"deviceIDs"`
	AllocResp []byte                    `json:"allocResp,omitempty"`
}

func (u unversionedPodResult) convert() PodResult {
	r := PodResult(u.podResultFields)
	r.Containers = nil
	for _, c := range u.Containers {
		cr := ContainerResult{Name: c.Name, Init: c.Init, Sidecar: c.Sidecar, RunOptions: c.RunOptions,
			AllocatedResourcesStatus: c.AllocatedResourcesStatus, Requests: c.Requests}
		for _, a := range c.Allocations {
			cr.Allocations = append(cr.Allocations, Allocation(a))
		}
		r.Containers = append(r.Containers, cr)
	}
	return r
}

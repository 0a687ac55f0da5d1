package checkpoint

import "fmt"

// FileName is the base name of the device manager checkpoint. The kubelet
// hard-codes it inside the device-plugin socket directory.
const FileName = "kubelet_internal_checkpoint"

// DevicesPerNUMA is checkpoint.DevicesPerNUMA.
type DevicesPerNUMA map[int64][]string

// PodDevicesEntry is checkpoint.PodDevicesEntry.
type PodDevicesEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     DevicesPerNUMA
	// AllocResp holds the protobuf wire bytes of the plugin's
	// v1beta1.ContainerAllocateResponse exactly as stored. nil is written as
	// JSON null, a non-nil empty slice as "".
	AllocResp []byte
}

// Data is checkpoint.Data.
type Data struct {
	PodDeviceEntries []PodDevicesEntry
	// RegisteredDevices lists the healthy device IDs per resource name. The
	// kubelet only uses the keys when it reads the file back.
	RegisteredDevices map[string][]string
}

// Layout identifies the on-disk shape a checkpoint was decoded from.
type Layout int

const (
	// LayoutV2 is the current layout (kubelet 1.20 and later): DeviceIDs is
	// an object keyed by NUMA node.
	LayoutV2 Layout = iota
	// LayoutV1 is the pre-1.20 layout: DeviceIDs is a flat list of IDs and
	// the checksum uses the 1.19 type names (docs/behaviour.md#legacy-v1-checkpoints).
	LayoutV1
)

// String returns "V2" or "V1".
func (l Layout) String() string {
	switch l {
	case LayoutV2:
		return "V2"
	case LayoutV1:
		return "V1"
	default:
		return fmt.Sprintf("Layout(%d)", int(l))
	}
}

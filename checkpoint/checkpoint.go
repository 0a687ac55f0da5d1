package checkpoint

import (
	impl "github.com/kdm-project/kdm/internal/checkpoint"
)

// FileName is the base name of the device manager checkpoint. The kubelet
// hard-codes it inside the device-plugin socket directory.
const FileName = impl.FileName

// Data is the content of a checkpoint, without its checksum: PodDeviceEntries
// ([]PodDevicesEntry) and RegisteredDevices (map[string][]string, the healthy
// device IDs per resource name; the kubelet reads back only the keys).
//
// nil and empty are different values, because the kubelet's checksum
// distinguishes them: a nil list or map is written as null and hashed as
// "<nil>", an empty one as [] or {} and "[]" or "map[]". Decode keeps the
// difference, so a decoded Data re-encodes to the same bytes. Its methods are
// Clone (a deep copy) and Sorted (a deep copy in the golden files' order).
type Data = impl.Data

// PodDevicesEntry is one (pod, container, resource) allocation: PodUID,
// ContainerName, ResourceName, DeviceIDs (a DevicesPerNUMA) and AllocResp,
// the protobuf wire bytes of the plugin's v1beta1.ContainerAllocateResponse
// exactly as stored (nil is written as null, an empty slice as "").
//
// Field names and order are part of both the JSON keys and the checksummed
// text.
type PodDevicesEntry = impl.PodDevicesEntry

// DevicesPerNUMA maps a NUMA node id to the device IDs of one allocation that
// are attached to that node. The key -1 means "no topology information". A
// device attached to several nodes is listed under each of them.
type DevicesPerNUMA = impl.DevicesPerNUMA

// Layout identifies the on-disk shape a checkpoint was decoded from; its
// String is "V2" or "V1".
type Layout = impl.Layout

const (
	// LayoutV2 is the current layout (kubelet 1.20 and later): DeviceIDs is
	// an object keyed by NUMA node.
	LayoutV2 = impl.LayoutV2
	// LayoutV1 is the pre-1.20 layout: DeviceIDs is a flat list of IDs and
	// the checksum uses the 1.19 type names (docs/behaviour.md#legacy-v1-checkpoints).
	LayoutV1 = impl.LayoutV1
)

// Encode returns the whole checkpoint file for d, {"Data":...,"Checksum":N},
// byte for byte what the kubelet's encoding/json writes for the same values,
// with Checksum(d). A nil d encodes as the zero Data. It fails only with
// ErrInvalidUTF8, reported before anything is produced.
func Encode(d *Data) ([]byte, error) { return impl.Encode(d) }

// Decode parses a whole checkpoint file and verifies its checksum.
//
// The V2 layout is tried first. A file that only fits the V1 layout, or fits
// both (no entry has DeviceIDs) but carries a valid V1 checksum, is accepted
// as LayoutV1 and converted the way kubelets 1.20 to 1.29 did: all devices of
// an entry under NUMA node 0. Kubelet 1.36 itself rejects V1 files.
//
// Errors: ErrNotJSON (wrapping the *json.SyntaxError), ErrUnknownLayout
// (wrapping the decoder's error), or *ChecksumError; all match ErrCorrupt.
// Decode never panics, whatever b holds, and does not retain b.
func Decode(b []byte) (*Data, Layout, error) { return impl.Decode(b) }

// DecodeUnverified parses a checkpoint file without checking its checksum,
// for inspection tools. It returns the data (V1 converted to NUMA node 0), the
// layout the file fits (V2 preferred) and the stored checksum. Errors are
// ErrNotJSON or ErrUnknownLayout as for Decode.
func DecodeUnverified(b []byte) (*Data, Layout, uint64, error) { return impl.DecodeUnverified(b) }

// Checksum returns the kubelet's checksum of d: FNV-1a 32 over the text the
// kubelet hashes (docs/behaviour.md#checkpoint-checksum).
func Checksum(d *Data) uint32 { return impl.Checksum(d) }

// ReadFile returns the content of the checkpoint file at path, read as
// Store.Read reads it, for tools that read a live node's checkpoint: a Store
// writing the same directory never changes the file while it is read. It
// refuses anything but a regular file (a FIFO cannot block it). Errors are
// *FileError naming path, wrapping the open's or the read's
// (errors.Is(err, fs.ErrNotExist) for a missing file).
func ReadFile(path string) ([]byte, error) { return impl.ReadFile(path) }

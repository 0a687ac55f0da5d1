package checkpoint

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	"k8s.io/utils/dump"
)

// The oracles below compute checksums and file bytes the kubelet's way, with
// reflection: go-spew through k8s.io/utils/dump.ForHash, and encoding/json.
// They exist only in tests, to prove the hand-written emitters identical.

// checkpointData mirrors the kubelet's unexported type of the same name.
// go-spew prints the type as "checkpoint.checkpointData", which is part of
// the hashed text, so this test file must stay in a package named
// checkpoint and the type name must not change.
type checkpointData struct {
	PodDeviceEntries  []PodDevicesEntry
	RegisteredDevices map[string][]string
}

// oracleFile mirrors the kubelet's outer checkpoint struct.
type oracleFile struct {
	Data     checkpointData
	Checksum uint64
}

func mirror(d *Data) checkpointData {
	return checkpointData{PodDeviceEntries: d.PodDeviceEntries, RegisteredDevices: d.RegisteredDevices}
}

// oracleHashText is dump.ForHash of the mirror value: the kubelet's hashed text.
func oracleHashText(d *Data) string {
	return dump.ForHash(mirror(d))
}

// oracleChecksum is the kubelet's hashutil.DeepHashObject with fnv.New32a.
func oracleChecksum(d *Data) uint32 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", oracleHashText(d))
	return h.Sum32()
}

// oracleEncode is the kubelet's json.Marshal of the whole checkpoint.
func oracleEncode(d *Data) ([]byte, error) {
	return json.Marshal(oracleFile{Data: mirror(d), Checksum: uint64(oracleChecksum(d))})
}

// PodDevicesEntryV1 and checkpointDataV1 mirror the 1.20-1.29 V1 types; their
// names matter for the same reason (they are renamed in the text afterwards).
type PodDevicesEntryV1 struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     []string
	AllocResp     []byte
}

type checkpointDataV1 struct {
	PodDeviceEntries  []PodDevicesEntryV1
	RegisteredDevices map[string][]string
}

// oracleChecksumV1 is the V1 checksum of kubelets 1.20 to 1.29 (docs/behaviour.md#legacy-v1-checkpoints).
func oracleChecksumV1(d *dataV1) uint32 {
	m := checkpointDataV1{RegisteredDevices: d.RegisteredDevices}
	if d.PodDeviceEntries != nil {
		m.PodDeviceEntries = make([]PodDevicesEntryV1, len(d.PodDeviceEntries))
		for i, e := range d.PodDeviceEntries {
			m.PodDeviceEntries[i] = PodDevicesEntryV1(e)
		}
	}
	object := dump.ForHash(m)
	object = strings.Replace(object, "checkpointDataV1", "checkpointData", 1)
	object = strings.Replace(object, "PodDevicesEntryV1", "PodDevicesEntry", -1)
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", object)
	return h.Sum32()
}

// toV1 flattens d into the V1 shape: the device lists of all NUMA keys in
// ascending key order, concatenated; a nil DeviceIDs map stays nil.
func toV1(d *Data) *dataV1 {
	out := &dataV1{RegisteredDevices: d.RegisteredDevices}
	if d.PodDeviceEntries != nil {
		out.PodDeviceEntries = []podDevicesEntryV1{}
	}
	for _, e := range d.PodDeviceEntries {
		var ids []string
		if e.DeviceIDs != nil {
			ids = []string{}
			for _, k := range slices.Sorted(maps.Keys(e.DeviceIDs)) {
				ids = append(ids, e.DeviceIDs[k]...)
			}
		}
		out.PodDeviceEntries = append(out.PodDeviceEntries, podDevicesEntryV1{
			PodUID: e.PodUID, ContainerName: e.ContainerName, ResourceName: e.ResourceName,
			DeviceIDs: ids, AllocResp: e.AllocResp,
		})
	}
	return out
}

package checkpoint

import "bytes"

// podDevicesEntryV1 and dataV1 mirror the pre-1.20 (V1) layout, where an
// entry's DeviceIDs is a flat list without NUMA information (docs/behaviour.md#legacy-v1-checkpoints).
type podDevicesEntryV1 struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     []string
	AllocResp     []byte
}

type dataV1 struct {
	PodDeviceEntries  []podDevicesEntryV1
	RegisteredDevices map[string][]string
}

// checksumV1 is the checksum kubelets 1.20 to 1.29 verified V1 files with:
// go-spew's text for the checkpointDataV1 type, with the first
// "checkpointDataV1" renamed to "checkpointData" and every
// "PodDevicesEntryV1" renamed to "PodDevicesEntry" (the 1.19 type names). The
// renaming was a plain text substitution over the whole dump, so it also
// applies to data that happens to contain those words; this does the same.
// V1 files are rare and small, so the whole text is built before hashing.
func checksumV1(d *dataV1) uint32 {
	s := newHasher(true)
	s.frag(s.t.headV1)
	s.entries(d.PodDeviceEntries == nil, len(d.PodDeviceEntries), func(i int) {
		e := &d.PodDeviceEntries[i]
		s.entryHead(e.PodUID, e.ContainerName, e.ResourceName)
		s.frag(s.t.devicesV1)
		s.strList(e.DeviceIDs)
		s.entryTail(e.AllocResp)
	})
	s.frag(s.t.reg)
	s.regMap(d.RegisteredDevices)
	s.char('}')

	text := bytes.Replace(s.text, []byte("checkpointDataV1"), []byte("checkpointData"), 1)
	text = bytes.ReplaceAll(text, []byte("PodDevicesEntryV1"), []byte("PodDevicesEntry"))
	return fnv1a(fnvOffset32, text)
}

// toV2 converts V1 data the way kubelets 1.20 to 1.29 did: with no NUMA
// information recorded, every device of an entry is put under node 0. The
// nil/empty state of the entry list and of the registered devices is kept.
func (d *dataV1) toV2() *Data {
	out := &Data{RegisteredDevices: d.RegisteredDevices}
	if d.PodDeviceEntries != nil {
		out.PodDeviceEntries = make([]PodDevicesEntry, 0, len(d.PodDeviceEntries))
	}
	for _, e := range d.PodDeviceEntries {
		out.PodDeviceEntries = append(out.PodDeviceEntries, PodDevicesEntry{
			PodUID:        e.PodUID,
			ContainerName: e.ContainerName,
			ResourceName:  e.ResourceName,
			DeviceIDs:     DevicesPerNUMA{0: e.DeviceIDs},
			AllocResp:     e.AllocResp,
		})
	}
	return out
}

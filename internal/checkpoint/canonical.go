package checkpoint

import (
	"cmp"
	"slices"
)

// Clone returns a deep copy of d that shares no slices or maps with it, with
// every nil and every empty value kept as it is (so the copy has the same
// checksum). A nil d gives nil.
func (d *Data) Clone() *Data {
	if d == nil {
		return nil
	}
	out := &Data{RegisteredDevices: cloneStringListMap(d.RegisteredDevices)}
	if d.PodDeviceEntries != nil {
		out.PodDeviceEntries = make([]PodDevicesEntry, len(d.PodDeviceEntries))
		for i, e := range d.PodDeviceEntries {
			out.PodDeviceEntries[i] = PodDevicesEntry{
				PodUID:        e.PodUID,
				ContainerName: e.ContainerName,
				ResourceName:  e.ResourceName,
				DeviceIDs:     DevicesPerNUMA(cloneStringListMap(e.DeviceIDs)),
				AllocResp:     slices.Clone(e.AllocResp),
			}
		}
	}
	return out
}

func cloneStringListMap[K comparable, M ~map[K][]string](m M) M {
	if m == nil {
		return nil
	}
	out := make(M, len(m))
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

// Sorted returns a deep copy of d in canonical order: entries by pod UID,
// container name and resource name (stable for ties), and every device ID
// list ascending. Map key order needs no work: Encode and Checksum always
// sort keys. nil and empty values are kept, so only the order changes, and
// two checkpoints with the same content in different orders have the same
// Sorted encoding. This is the order of the golden files; the kubelet itself
// writes in map iteration order. A nil d gives nil.
func (d *Data) Sorted() *Data {
	out := d.Clone()
	if out == nil {
		return nil
	}
	slices.SortStableFunc(out.PodDeviceEntries, func(a, b PodDevicesEntry) int {
		return cmp.Or(
			cmp.Compare(a.PodUID, b.PodUID),
			cmp.Compare(a.ContainerName, b.ContainerName),
			cmp.Compare(a.ResourceName, b.ResourceName),
		)
	})
	for _, e := range out.PodDeviceEntries {
		for _, ids := range e.DeviceIDs {
			slices.Sort(ids)
		}
	}
	for _, ids := range out.RegisteredDevices {
		slices.Sort(ids)
	}
	return out
}

package deviceplugin

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Devices returns a deep copy of the current device list.
func (p *Plugin) Devices() []*pluginapi.Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	return snapshot(p.devices)
}

// SetDevices replaces the device list with a deep copy of devs and queues the new list on
// every open ListAndWatch stream. Nil entries are skipped (and logged). Updates reach each
// stream in the order of the calls, none coalesced; SetDevices never waits for a stream.
func (p *Plugin) SetDevices(devs []*pluginapi.Device) {
	list := make([]*pluginapi.Device, 0, len(devs))
	for i, d := range devs {
		if d == nil {
			p.log.Info("Ignoring nil device in SetDevices", "index", i)
			continue
		}
		list = append(list, proto.Clone(d).(*pluginapi.Device))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.devices = list
	p.pushLocked()
	p.log.V(4).Info("Device list replaced", "devices", len(list))
}

// SetHealth sets the Health of every device with this ID (normally pluginapi.Healthy or
// pluginapi.Unhealthy; any string is sent as given) and queues the new list on every open
// stream, even when the health did not change. An ID not in the list is an error wrapping
// ErrUnknownDevice, and nothing is sent.
//
// Published lists are immutable: the new list shares every unchanged device with the old
// one and carries fresh copies of the changed ones.
func (p *Plugin) SetHealth(id, health string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var list []*pluginapi.Device
	for i, d := range p.devices {
		if d.GetID() != id {
			continue
		}
		if list == nil {
			list = append([]*pluginapi.Device(nil), p.devices...)
		}
		changed := proto.Clone(d).(*pluginapi.Device)
		changed.Health = health
		list[i] = changed
	}
	if list == nil {
		return fmt.Errorf("%w %q for resource %q", ErrUnknownDevice, id, p.cfg.ResourceName)
	}
	p.devices = list
	p.pushLocked()
	p.log.V(4).Info("Device health changed", "deviceID", id, "health", health)
	return nil
}

// snapshot deep-copies a device list that holds no nil entries.
func snapshot(devs []*pluginapi.Device) []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(devs))
	for i, d := range devs {
		out[i] = proto.Clone(d).(*pluginapi.Device)
	}
	return out
}

package devicemanager

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
)

// BenchmarkStartRestore measures Start on a plugin directory whose checkpoint holds 250 pods
// of 4 devices, each with a plugin answer of an environment variable and a device node and a
// CDI device per device: reading, verifying and restoring the checkpoint, cleaning the
// directory and serving kubelet.sock. The restore may finish after Start returns, so the op
// ends with the first call that reads the restored state. Stop is not timed.
func BenchmarkStartRestore(b *testing.B) {
	dir := shortDir(b)
	store, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	d := &checkpoint.Data{RegisteredDevices: map[string][]string{gpu: {}}}
	for p := range 250 {
		ids := make([]string, 4)
		resp := &pluginapi.ContainerAllocateResponse{}
		for i := range ids {
			ids[i] = fmt.Sprintf("GPU-%08x-4b1e-9d7a-%012x", 4*p+i, 4*p+i)
			resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/x-" + ids[i], HostPath: "/dev/x-" + ids[i], Permissions: "rw"})
			resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: gpu + "=" + ids[i]})
		}
		resp.Envs = map[string]string{"VISIBLE_DEVICES": fmt.Sprint(ids)}
		raw, err := proto.Marshal(resp)
		if err != nil {
			b.Fatal(err)
		}
		d.RegisteredDevices[gpu] = append(d.RegisteredDevices[gpu], ids...)
		d.PodDeviceEntries = append(d.PodDeviceEntries, checkpoint.PodDevicesEntry{PodUID: fmt.Sprintf("pod-%04d", p),
			ContainerName: "cuda", ResourceName: gpu, DeviceIDs: checkpoint.DevicesPerNUMA{-1: ids}, AllocResp: raw})
	}
	if err := store.Write(d); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		m, err := New(Config{PluginDir: dir, Logger: logr.Discard()})
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Start(context.Background(), Sources{}); err != nil {
			b.Fatal(err)
		}
		got := len(m.GetDevices("pod-0249", "cuda")[gpu])
		b.StopTimer()
		if got != 4 {
			b.Fatalf("the last pod holds %d devices after the restore, want 4", got)
		}
		if err := m.Stop(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

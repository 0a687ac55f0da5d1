package devicemanager

import (
	"context"
	"errors"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestWaitForResource: a wait started before the plugin registers returns once the plugin's
// first list is applied (capacity is then known); a wait for a ready
// resource returns at once; a wait ends with the caller's context, naming the resource, and
// with the manager's Stop.
func TestWaitForResource(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	waited := make(chan error, 1)
	go func() { waited <- m.WaitForResource(context.Background(), gpu) }()

	select {
	case err := <-waited:
		t.Fatalf("WaitForResource returned %v before any plugin registered", err)
	case <-time.After(100 * time.Millisecond):
	}
	// The manager learns of the plugin at its Register, and of its devices from its first
	// list, just after: the wait must end on the list.
	testPlugin(t, dir, gpu, "p.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("WaitForResource: %v", err)
		}
	case <-ctx.Done():
		t.Fatalf("WaitForResource did not return after the plugin's first list")
	}
	if !capacityIs(m, gpu, 2, 2) {
		t.Fatalf("WaitForResource returned before the capacity was known")
	}
	if err := m.WaitForResource(context.Background(), gpu); err != nil {
		t.Fatalf("WaitForResource on a ready resource: %v", err)
	}

	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	err := m.WaitForResource(short, "example.com/absent")
	if !errors.Is(err, context.DeadlineExceeded) || err.Error() != "waiting for device plugin of example.com/absent: context deadline exceeded" {
		t.Fatalf("WaitForResource with an expiring context: %v", err)
	}

	go func() { waited <- m.WaitForResource(context.Background(), "example.com/absent") }()
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, ErrManagerStopped) {
		t.Fatalf("WaitForResource across Stop: %v, want ErrManagerStopped", err)
	}
	if err := m.WaitForResource(context.Background(), gpu); !errors.Is(err, ErrManagerStopped) {
		t.Fatalf("WaitForResource after Stop: %v, want ErrManagerStopped", err)
	}
}

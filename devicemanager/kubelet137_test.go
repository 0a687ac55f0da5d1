package devicemanager

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
	"github.com/kdm-project/kdm/endpoint"
)

// The kubelet v1.37's changes to plugin re-registration, each held under kubelet-1.37 and
// checked to keep the kubelet v1.36's result under kubelet-1.36.

// TestSameSocketRegistration: a Register for a socket that a connected instance of the
// resource serves is refused under kubelet-1.37 with the kubelet's text, naming the socket as
// the plugin named it (a symlink is not resolved in the message), as gRPC Unknown; the
// connected instance stays current and its stream ending still disconnects it, after which
// the socket registers again. Under kubelet-1.36 the Register replaces the instance; under kdm
// too (a plugin that registers twice on one socket keeps working).
func TestSameSocketRegistration(t *testing.T) {
	for _, tc := range []struct {
		policy string
		refuse bool
	}{{"kubelet-1.36", false}, {"kubelet-1.37", true}, {"kdm", false}} {
		t.Run(tc.policy, func(t *testing.T) {
			policy, err := ParsePolicy(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			dir := shortDir(t)
			m := testManager(t, dir, Config{Policy: policy}, Sources{})
			p := testPlugin(t, dir, gpu, "p.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"),
				func(c *deviceplugin.Config) { c.Registration = deviceplugin.NoRegistration })
			if err := os.Symlink("p.sock", filepath.Join(dir, "link.sock")); err != nil {
				t.Fatal(err)
			}
			client := registrationClient(t, m.SocketPath())
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			register := func(endpoint string) error {
				_, err := client.Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: endpoint, ResourceName: gpu})
				return err
			}
			if err := register("p.sock"); err != nil {
				t.Fatalf("first Register: %v", err)
			}
			waitFor(t, m, "first instance", func() bool { return capacityIs(m, gpu, 2, 2) })
			m.mu.Lock()
			first := m.endpoints[gpu].ep
			m.mu.Unlock()

			err = register("link.sock")
			if !tc.refuse {
				if err != nil {
					t.Fatalf("second Register on the same socket: %v, want it accepted", err)
				}
				waitFor(t, m, "second instance current", func() bool {
					m.mu.Lock()
					defer m.mu.Unlock()
					return m.endpoints[gpu].ep != first
				})
				return
			}
			want := "device plugin already connected: " + filepath.Join(dir, "link.sock")
			if st := status.Convert(err); err == nil || st.Code() != codes.Unknown || st.Message() != want {
				t.Fatalf("second Register on the same socket: %v, want code Unknown and %q", err, want)
			}
			m.mu.Lock()
			current, replaced := m.endpoints[gpu].ep, len(m.replaced[gpu])
			m.mu.Unlock()
			if current != first || replaced != 0 {
				t.Fatalf("after the refusal: current instance changed %v, %d replaced; want the first instance current and none replaced", current != first, replaced)
			}
			if n := p.OpenStreams(); n != 1 {
				t.Fatalf("%d ListAndWatch streams open after the refusal, want 1", n)
			}
			// Unlike the kubelet v1.37, the refusal does not orphan the working instance: its
			// stream's end still disconnects it, and the socket can register again.
			p.DropStreams()
			waitFor(t, m, "the working instance's disconnect", func() bool { return capacityIs(m, gpu, 2, 0) })
			if err := register("p.sock"); err != nil {
				t.Fatalf("Register after the working instance disconnected: %v", err)
			}
			waitFor(t, m, "registered again", func() bool { return capacityIs(m, gpu, 2, 2) })
		})
	}
}

// TestSameSocketRefusalAfterOptions: under kubelet-1.37 the same-socket check comes after the
// dial and GetDevicePluginOptions, so an options failure is what the plugin hears.
func TestSameSocketRefusalAfterOptions(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{Policy: rowPolicy(t, "kubelet-1.37"), Endpoint: endpoint.Config{OptionsTimeout: 200 * time.Millisecond}}, Sources{})
	p := testPlugin(t, dir, gpu, "p.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1"),
		func(c *deviceplugin.Config) { c.Registration = deviceplugin.NoRegistration })
	client := registrationClient(t, m.SocketPath())
	req := &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "p.sock", ResourceName: gpu}
	if _, err := client.Register(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "first instance", func() bool { return capacityIs(m, gpu, 1, 1) })
	p.SetFaults(plugintest.Faults{HangOptions: true})
	_, err := client.Register(context.Background(), req)
	if st := status.Convert(err); err == nil || st.Code() != codes.Unknown || !hasPrefix(st.Message(), "failed to get device plugin options: ") {
		t.Fatalf("Register with a hanging options call: %v, want the options error", err)
	}
}

func hasPrefix(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

// TestPromotionOnDisconnect: with two instances of a resource connected (a rolling update
// whose new instance registered first), the newer instance's exit leaves the resource served
// by the older one under kubelet-1.37 and kdm: allocatable never dips, no stop time is set,
// and Allocate goes to the promoted instance; only the last instance's exit marks the devices
// unhealthy (capacity kept for the grace period). Under kubelet-1.36 the newer instance's
// exit marks them unhealthy at once.
func TestPromotionOnDisconnect(t *testing.T) {
	for _, tc := range []struct {
		policy  string
		promote bool
	}{{"kubelet-1.36", false}, {"kubelet-1.37", true}, {"kdm", true}} {
		t.Run(tc.policy, func(t *testing.T) {
			policy, err := ParsePolicy(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			dir := shortDir(t)
			m := testManager(t, dir, Config{Policy: policy}, Sources{ActivePods: func() []*v1.Pod { return nil }})
			old := testPlugin(t, dir, gpu, "old.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
			waitFor(t, m, "old instance", func() bool { return capacityIs(m, gpu, 2, 2) })
			cur := testPlugin(t, dir, gpu, "new.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
			waitFor(t, m, "new instance current", func() bool { return m.currentSocket(gpu) == cur.SocketPath() })

			w := watchAllocatable(m, gpu)
			t.Cleanup(func() { w.result() })
			cur.Stop()
			if !tc.promote {
				waitFor(t, m, "devices unhealthy", func() bool { return capacityIs(m, gpu, 2, 0) })
				return
			}
			waitFor(t, m, "old instance promoted", func() bool { return m.currentSocket(gpu) == old.SocketPath() })
			if _, dipped := w.result(); dipped || !capacityIs(m, gpu, 2, 2) {
				c, a, _ := m.GetCapacity()
				t.Fatalf("after the promotion: dipped %v, capacity %v allocatable %v; want 2/2 and no dip", dipped, c, a)
			}
			pod := testPod("p1", container("c", map[string]int64{gpu: 1}))
			m.sources.ActivePods = func() []*v1.Pod { return []*v1.Pod{pod} }
			if err := m.Allocate(context.Background(), pod, &pod.Spec.Containers[0]); err != nil {
				t.Fatalf("Allocate through the promoted instance: %v", err)
			}
			if n := len(old.Calls().Allocate); n != 1 {
				t.Fatalf("the promoted instance got %d Allocate calls, want 1", n)
			}
			// A list sent by the promoted instance now applies.
			if err := old.SetHealth("g2", pluginapi.Unhealthy); err != nil {
				t.Fatal(err)
			}
			waitFor(t, m, "promoted instance's health update", func() bool { return capacityIs(m, gpu, 2, 1) })
			old.Stop()
			waitFor(t, m, "last instance's disconnect", func() bool { return capacityIs(m, gpu, 2, 0) })
		})
	}
}

// TestPromotionAppliesTheLastReplacedList: a list the replaced instance sent while replaced is
// not applied then, but is what the resource has once that instance is promoted.
func TestPromotionAppliesTheLastReplacedList(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{Policy: rowPolicy(t, "kubelet-1.37")}, Sources{})
	old := testPlugin(t, dir, gpu, "old.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
	waitFor(t, m, "old instance", func() bool { return capacityIs(m, gpu, 2, 2) })
	cur := testPlugin(t, dir, gpu, "new.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
	waitFor(t, m, "new instance current", func() bool { return m.currentSocket(gpu) == cur.SocketPath() })
	if err := old.SetHealth("g1", pluginapi.Unhealthy); err != nil {
		t.Fatal(err)
	}
	// Keeping a replaced instance's list changes no device set, so nothing signals it: poll.
	for deadline := time.Now().Add(waitTimeout); ; time.Sleep(5 * time.Millisecond) {
		m.mu.Lock()
		kept := len(m.replacedLists)
		m.mu.Unlock()
		if kept == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replaced instance's list was not kept")
		}
	}
	if !capacityIs(m, gpu, 2, 2) {
		t.Fatalf("a replaced instance's list was applied")
	}
	cur.Stop()
	waitFor(t, m, "promoted with its last list", func() bool {
		return m.currentSocket(gpu) == old.SocketPath() && capacityIs(m, gpu, 2, 1)
	})
}

// TestWatcherRemovalStopsItsOwnInstance: a plugins_registry socket's removal stops the
// instance registered through it. Under kubelet-1.37 that includes a replaced instance (the
// current one stays); under kubelet-1.36 only the current instance is stopped, so a replaced
// one keeps its stream.
func TestWatcherRemovalStopsItsOwnInstance(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		stopsOld bool
	}{{"kubelet-1.36", false}, {"kubelet-1.37", true}} {
		t.Run(tc.policy, func(t *testing.T) {
			policy, err := ParsePolicy(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			dir := shortDir(t)
			watch := filepath.Join(dir, "plugins_registry")
			m := testManager(t, dir, Config{Policy: policy, PluginWatcherDir: watch}, Sources{})
			viaWatcher := func(c *deviceplugin.Config) {
				c.Registration = deviceplugin.PluginWatcher
				c.WatcherDir = watch
			}
			old := testPlugin(t, dir, gpu, "old.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1"), viaWatcher)
			waitFor(t, m, "old instance", func() bool { return capacityIs(m, gpu, 1, 1) })
			cur := testPlugin(t, dir, gpu, "new.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1"))
			waitFor(t, m, "new instance current", func() bool { return m.currentSocket(gpu) == cur.SocketPath() })

			// The replaced instance is taken before its registry socket goes: the watcher may
			// act on the removal at once.
			m.mu.Lock()
			oldEP := m.replaced[gpu]
			m.mu.Unlock()
			if len(oldEP) != 1 {
				t.Fatalf("%d replaced instances, want 1", len(oldEP))
			}
			regs, err := filepath.Glob(filepath.Join(watch, "*"))
			if err != nil || len(regs) != 1 {
				t.Fatalf("plugins_registry holds %v (%v), want the old instance's socket", regs, err)
			}
			if err := os.Remove(regs[0]); err != nil {
				t.Fatal(err)
			}
			if tc.stopsOld {
				waitFor(t, m, "the replaced instance stopped", func() bool {
					m.mu.Lock()
					defer m.mu.Unlock()
					return len(m.replaced[gpu]) == 0
				})
			} else {
				// The removal is seen by the watcher; give it time to act wrongly.
				time.Sleep(300 * time.Millisecond)
				if !oldEP[0].IsStopped() && old.OpenStreams() != 1 {
					t.Fatalf("the replaced instance's stream is gone under kubelet-1.36")
				}
				if oldEP[0].IsStopped() {
					t.Fatalf("kubelet-1.36 stopped a replaced instance on its registry socket's removal")
				}
			}
			if m.currentSocket(gpu) != cur.SocketPath() || !capacityIs(m, gpu, 1, 1) {
				t.Fatalf("the current instance was disturbed by another instance's registry socket removal")
			}
		})
	}
}

// TestResizeSkipsAllocation: an in-place resize of a container whose device has turned
// unhealthy is admitted at once under kubelet-1.37 and kdm, and refused with the allocation's
// health error under kubelet-1.36, which runs the allocation again; an add is Allocate under
// every policy.
func TestResizeSkipsAllocation(t *testing.T) {
	for _, tc := range []struct {
		policy  string
		wantErr string
	}{
		{"kubelet-1.36", "previously allocated devices are no longer healthy; cannot allocate unhealthy devices " + gpu},
		{"kubelet-1.37", ""},
		{"kdm", ""},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			policy, err := ParsePolicy(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			dir := shortDir(t)
			pod := testPod("p1", container("c", map[string]int64{gpu: 1}))
			m := testManager(t, dir, Config{Policy: policy}, Sources{ActivePods: func() []*v1.Pod { return []*v1.Pod{pod} }})
			p := testPlugin(t, dir, gpu, "p.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
			waitFor(t, m, "plugin", func() bool { return capacityIs(m, gpu, 2, 2) })
			c := &pod.Spec.Containers[0]
			if err := m.AllocateFor(context.Background(), pod, c, AddOperation); err != nil {
				t.Fatal(err)
			}
			held := heldIDs(m, string(pod.UID), c.Name)
			if len(held) != 1 {
				t.Fatalf("after the add: %v, want one device", held)
			}
			if err := p.SetHealth(held[0], pluginapi.Unhealthy); err != nil {
				t.Fatal(err)
			}
			waitFor(t, m, "device unhealthy", func() bool { return capacityIs(m, gpu, 2, 1) })
			allocates := len(p.Calls().Allocate)
			err = m.AllocateFor(context.Background(), pod, c, ResizeOperation)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Fatalf("resize: %v, want %q", err, tc.wantErr)
			}
			if n := len(p.Calls().Allocate); n != allocates {
				t.Fatalf("the resize called the plugin's Allocate %d times", n-allocates)
			}
			if got := heldIDs(m, string(pod.UID), c.Name); len(got) != 1 || got[0] != held[0] {
				t.Fatalf("the resize changed the container's devices: %v, want %v", got, held)
			}
		})
	}
}

// heldIDs lists the gpu devices the container holds.
func heldIDs(m *Manager, podUID, container string) []string {
	var ids []string
	for id := range m.GetDevices(podUID, container)[gpu] {
		ids = append(ids, id)
	}
	return ids
}

// TestHealthUpdatesMatchedByResource: two resources whose plugins both call a device "0";
// a health change of one resource's "0" announces the pod holding that resource's device, and
// not the pod holding the other resource's "0". The kubelet v1.37 matches so (the kubelet
// v1.36 looked the device up by ID alone); kdm does under every policy.
func TestHealthUpdatesMatchedByResource(t *testing.T) {
	const nic = "example.com/nic"
	for _, policy := range PolicyNames() {
		t.Run(policy, func(t *testing.T) {
			p, err := ParsePolicy(policy)
			if err != nil {
				t.Fatal(err)
			}
			p.CoalesceDeviceListWrites = false
			m := testManager(t, shortDir(t), Config{Policy: p}, Sources{})
			seed(m, gpu, devices(pluginapi.Healthy, "0", "1")...)
			seed(m, nic, devices(pluginapi.Healthy, "0", "1")...)
			hold(m, "gpu-pod", "c", gpu, "0")
			hold(m, "nic-pod", "c", nic, "0")
			for len(m.Updates()) > 0 {
				<-m.Updates()
			}
			m.updateDevices(nic, m.currentEndpointFor(nic).ep, append(devices(pluginapi.Unhealthy, "0"), devices(pluginapi.Healthy, "1")...))
			if p.NoDeviceHealthInPodStatus { // the kubelet v1.35 announces no health at all
				if n := len(m.Updates()); n != 0 {
					t.Fatalf("%d updates under %s, which reports no device health", n, policy)
				}
				return
			}
			select {
			case u := <-m.Updates():
				if len(u.PodUIDs) != 1 || u.PodUIDs[0] != "nic-pod" {
					t.Fatalf("health change of %s device 0 announced pods %v, want [nic-pod]", nic, u.PodUIDs)
				}
			default:
				t.Fatalf("health change of %s device 0 announced nothing", nic)
			}
			if n := len(m.Updates()); n != 0 {
				t.Fatalf("%d more updates, want none", n)
			}
		})
	}
}

// TestLateListOfAStoppedInstanceIgnored: a promoted instance's last list is applied after the
// lock that promoted it is let go; if the instance's own stream has ended by then, its end
// has marked the devices unhealthy, and the late list must not make them healthy again with no
// stream left to correct them. The lockstep check caught that schedule under load (kdm policy,
// seed 2624: allocatable stuck at 3 of 4 after the plugin stopped); here the late application
// is made to come last.
func TestLateListOfAStoppedInstanceIgnored(t *testing.T) {
	for _, policy := range []string{"kubelet-1.37", "kdm"} {
		t.Run(policy, func(t *testing.T) {
			dir := shortDir(t)
			pol, err := ParsePolicy(policy)
			if err != nil {
				t.Fatal(err)
			}
			m := testManager(t, dir, Config{Policy: pol}, Sources{})
			p := testPlugin(t, dir, gpu, "p.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
			waitFor(t, m, "instance serving", func() bool { return capacityIs(m, gpu, 2, 2) })
			m.mu.Lock()
			ep := m.endpoints[gpu].ep
			m.mu.Unlock()
			p.Stop()
			waitFor(t, m, "devices unhealthy", func() bool { return capacityIs(m, gpu, 2, 0) })
			m.applyPromotedList(gpu, ep, devices(pluginapi.Healthy, "g1", "g2"))
			if !capacityIs(m, gpu, 2, 0) {
				t.Fatal("a list applied after its instance's stream ended made the devices healthy again")
			}
		})
	}
}

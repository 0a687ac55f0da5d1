package devicemanager

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
)

// watcherManager builds and starts a manager with the plugins_registry watcher, after hooks
// sets its test hooks (they must be in place before any goroutine reads them).
func watcherManager(t *testing.T, dir string, hooks func(*Manager)) *Manager {
	t.Helper()
	m, err := New(Config{PluginDir: dir, PluginWatcherDir: filepath.Join(dir, "plugins_registry"),
		Logger: ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	hooks(m)
	if err := m.Start(context.Background(), Sources{}); err != nil {
		t.Fatal(err)
	}
	return m
}

func viaWatcher(dir string) func(*deviceplugin.Config) {
	return func(c *deviceplugin.Config) {
		c.Registration = deviceplugin.PluginWatcher
		c.WatcherDir = filepath.Join(dir, "plugins_registry")
	}
}

// TestStopDuringWatcherRegistration: Stop begins while a plugins_registry registration has
// dialled its plugin but not yet made it current. The registration must learn that the manager
// stopped and give up, and Stop must return: it used to hold the lifecycle lock while joining
// the watcher, which waited for that same lock.
func TestStopDuringWatcherRegistration(t *testing.T) {
	dir := shortDir(t)
	dialed, proceed := make(chan struct{}), make(chan struct{})
	m := watcherManager(t, dir, func(m *Manager) {
		m.testHookAfterDial = func() {
			close(dialed)
			<-proceed
		}
	})
	testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1"), viaWatcher(dir))
	select {
	case <-dialed:
	case <-time.After(waitTimeout):
		t.Fatal("the watcher never dialled the plugin")
	}
	stopped := make(chan struct{})
	go func() {
		_ = m.Stop()
		close(stopped)
	}()
	<-m.runCtx.Done() // Stop has begun
	close(proceed)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return: it deadlocked with the watcher's registration")
	}
	if _, ok := m.endpoints[gpu]; ok {
		t.Fatalf("a registration that finished after Stop began was made current")
	}
}

// TestWatcherTracksItsOwnInstance: right after a plugins_registry registration connects,
// another instance of the resource registers through kubelet.sock. When the first plugin's
// registry socket goes away, only its own (already replaced) instance is stopped; the current
// one keeps serving. The watcher used to read back whichever instance was current.
func TestWatcherTracksItsOwnInstance(t *testing.T) {
	dir := shortDir(t)
	secondCh := make(chan *plugintest.Plugin, 1)
	once := make(chan struct{})
	m := watcherManager(t, dir, func(m *Manager) {
		m.testHookAfterWatcherConnect = func() {
			select {
			case <-once:
				return
			default:
				close(once)
			}
			second := testPlugin(t, dir, gpu, "second.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"))
			waitFor(t, m, "the second instance current", func() bool { return m.currentSocket(gpu) == second.SocketPath() })
			secondCh <- second
		}
	})
	t.Cleanup(func() { _ = m.Stop() })
	first := testPlugin(t, dir, gpu, "first.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2"), viaWatcher(dir))
	var second *plugintest.Plugin
	select {
	case second = <-secondCh:
	case <-time.After(waitTimeout):
		t.Fatal("the watcher's registration never connected")
	}
	waitFor(t, m, "second instance serving", func() bool { return capacityIs(m, gpu, 2, 2) })
	first.Stop() // removes its registry socket: the watcher forgets the first instance
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if !capacityIs(m, gpu, 2, 2) || m.currentSocket(gpu) != second.SocketPath() {
			c, al, _ := m.GetCapacity()
			t.Fatalf("the current instance was disturbed when the first plugin's registry socket went away: %v / %v", c, al)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

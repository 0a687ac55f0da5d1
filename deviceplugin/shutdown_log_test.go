package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestWaitingForKubeletIsLoggedAndShutdownIsQuiet: a plugin started before any manager says at
// once where it waits for kubelet.sock; shut down while it waits, it reports no failure, never
// says it started, and Run returns cleanly.
func TestWaitingForKubeletIsLoggedAndShutdownIsQuiet(t *testing.T) {
	dir := t.TempDir()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4), ktesting.BufferLogs(true)))
	logs := func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }
	p, err := New(Config{ResourceName: "example.com/dev", PluginDir: dir, KeepRegistering: true, Logger: logger,
		Devices: []*pluginapi.Device{{ID: "d1", Health: pluginapi.Healthy}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	want := "Waiting for the kubelet's registration socket"
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q line while kubelet.sock is missing; logs:\n%s", want, logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs(), filepath.Join(dir, "kubelet.sock")) {
		t.Fatalf("the waiting line does not name %s", filepath.Join(dir, "kubelet.sock"))
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after a shutdown during the first registration: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	for _, bad := range []string{"Device plugin started", "failed to register"} {
		if strings.Contains(logs(), bad) {
			t.Fatalf("logged %q during a shutdown:\n%s", bad, logs())
		}
	}
}

// TestOneRegisterForALateKubelet: a plugin started before its manager registers exactly once
// when kubelet.sock appears: the socket's creation, seen by the watcher while the first
// Register was on its way, does not cause a second Register to the same socket. A socket
// created again afterwards (a manager restart) still gets a new Register.
func TestOneRegisterForALateKubelet(t *testing.T) {
	for round := 0; round < 5; round++ {
		dir := shortDir(t)
		p := newPlugin(t, Config{ResourceName: gpu, PluginDir: dir, Devices: devices(pluginapi.Healthy, "a")})
		started := make(chan error, 1)
		go func() { started <- p.Start(context.Background()) }()
		time.Sleep(100 * time.Millisecond)
		sock := filepath.Join(dir, "kubelet.sock")
		k := startFakeKubelet(t, sock, true)
		if err := <-started; err != nil {
			t.Fatalf("Start: %v", err)
		}
		time.Sleep(500 * time.Millisecond) // a second Register would come within milliseconds
		if n := p.Registrations(); n != 1 {
			t.Fatalf("round %d: %d Registers to one kubelet.sock, want 1", round, n)
		}
		k.Stop()
		_ = os.Remove(sock)
		startFakeKubelet(t, sock, true)
		deadline := time.Now().Add(waitTimeout)
		for p.Registrations() != 2 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no Register to the re-created kubelet.sock", round)
			}
			time.Sleep(10 * time.Millisecond)
		}
		p.Stop()
	}
}

package deviceplugin

import (
	"context"
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

package plugintest

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/deviceplugin"
)

// TestSecondRegisterDelay: under RegisterTwice with SecondRegisterDelay, the second Register
// waits for the delay on the plugin's clock, and comes once it has passed.
func TestSecondRegisterDelay(t *testing.T) {
	dir := shortDir(t)
	k := startFakeKubelet(t, filepath.Join(dir, "kubelet.sock"), true)
	clk := clocktesting.NewFakeClock(time.Now())
	p := newPlugin(t, deviceplugin.Config{ResourceName: gpu, PluginDir: dir, Clock: clk})
	p.SetFaults(Faults{RegisterTwice: true, SecondRegisterDelay: time.Hour})
	started := make(chan error, 1)
	go func() { started <- p.Start(context.Background()) }()
	k.Next(t)
	// The fake kubelet opens no stream: after secondRegisterWait the delay's timer starts.
	deadline := time.Now().Add(waitTimeout)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the second Register never started waiting for its delay")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case req := <-k.Got:
		t.Fatalf("second Register before its delay passed: %v", req)
	default:
	}
	clk.Step(time.Hour)
	if req := k.Next(t); req.ResourceName != gpu {
		t.Fatalf("second Register: %v", req)
	}
	if err := <-started; err != nil {
		t.Fatalf("Start: %v", err)
	}
	if got := p.Registrations(); got != 2 {
		t.Fatalf("Registrations() = %d, want 2", got)
	}
}

// TestExitOnReregisterAfterStreamClose: under the fault, a re-registration after a manager
// restart is harmless while no stream was closed by the manager; once one was, the next
// re-registration succeeds and then the plugin stops itself, Run returning ErrStreamClosed.
func TestExitOnReregisterAfterStreamClose(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "kubelet.sock")
	k := startFakeKubelet(t, sock, true)
	p := newPlugin(t, deviceplugin.Config{ResourceName: gpu, PluginDir: dir, Devices: devices(pluginapi.Healthy, "a")})
	p.SetFaults(Faults{ExitOnReregisterAfterStreamClose: true})
	ran := make(chan error, 1)
	go func() { ran <- p.Run(context.Background()) }()
	k.Next(t)
	if err := p.WaitForRegistrations(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}

	// A manager restart with no stream closed: the plugin re-registers and stays.
	k.Stop()
	k = startFakeKubelet(t, sock, true)
	k.Next(t)
	if err := p.WaitForRegistrations(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}

	// The manager closes a stream: the plugin keeps running.
	ctx, cancel := context.WithCancel(context.Background())
	s, err := pluginClient(t, p.SocketPath()).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, s)
	cancel()
	if err := p.WaitForCalls(waitCtx(t), func(c Calls) bool { return c.StreamsClosedByManager == 1 }); err != nil {
		t.Fatal(err)
	}
	if err := p.Exited(); err != nil {
		t.Fatalf("the plugin exited when its stream was closed: %v", err)
	}

	// The next manager restart: it re-registers, then exits.
	k.Stop()
	k = startFakeKubelet(t, sock, true)
	k.Next(t)
	select {
	case err := <-ran:
		if !errors.Is(err, ErrStreamClosed) {
			t.Fatalf("Run = %v, want ErrStreamClosed", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the plugin did not exit after re-registering")
	}
	if got := p.Registrations(); got != 3 {
		t.Fatalf("Registrations() = %d, want 3", got)
	}
}

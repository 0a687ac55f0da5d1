package endpoint

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestDial(t *testing.T) {
	p := newStubPlugin()
	p.opts = &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}
	path := serve(t, p)

	e, err := Dial(context.Background(), "example.com/dev", path, Config{})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer e.Stop()
	if got := e.ResourceName(); got != "example.com/dev" {
		t.Errorf("ResourceName() = %q", got)
	}
	if got := e.SocketPath(); got != path {
		t.Errorf("SocketPath() = %q, want %q", got, path)
	}
	if !proto.Equal(e.Options(), p.opts) {
		t.Errorf("Options() = %v, want %v", e.Options(), p.opts)
	}
	if e.IsStopped() || !e.StopTime().IsZero() || e.GracePeriodExpired(0) {
		t.Errorf("fresh endpoint: IsStopped=%v StopTime=%v GracePeriodExpired(0)=%v, want running",
			e.IsStopped(), e.StopTime(), e.GracePeriodExpired(0))
	}
}

func TestDialNoListener(t *testing.T) {
	dir := socketDir(t)
	// A stale socket file: bound, then closed without unlinking, so connect is refused.
	stale := filepath.Join(dir, "stale.sock")
	lis, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = lis.Close()

	for name, path := range map[string]string{
		"missing file": filepath.Join(dir, "missing.sock"),
		"stale socket": stale,
	} {
		t.Run(name, func(t *testing.T) {
			e, err := Dial(context.Background(), "example.com/dev", path, Config{DialTimeout: 200 * time.Millisecond})
			if err == nil {
				e.Stop()
				t.Fatal("Dial succeeded without a listener")
			}
			if !strings.HasPrefix(err.Error(), "failed to dial device plugin: ") {
				t.Errorf("error %q lacks the kubelet's prefix", err)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "last connect error") {
				t.Errorf("error %q should name the socket and the connect error", err)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %q is not context.DeadlineExceeded", err)
			}
		})
	}
}

func TestDialCancelledContext(t *testing.T) {
	p := newStubPlugin()
	path := serve(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e, err := Dial(ctx, "example.com/dev", path, Config{})
	if err == nil {
		e.Stop()
		t.Fatal("Dial succeeded with a cancelled context")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %q is not context.Canceled", err)
	}
}

func TestDialOptionsDeadline(t *testing.T) {
	p := newStubPlugin()
	p.onOptions = blockUntilDone
	path := serve(t, p)

	e, err := Dial(context.Background(), "example.com/dev", path, Config{OptionsTimeout: 200 * time.Millisecond})
	if err == nil {
		e.Stop()
		t.Fatal("Dial succeeded although GetDevicePluginOptions hangs")
	}
	if !strings.HasPrefix(err.Error(), "failed to get device plugin options: ") {
		t.Errorf("error %q lacks the kubelet's prefix", err)
	}
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("status code of %q = %v, want DeadlineExceeded", err, status.Code(err))
	}
}

func TestDialOptionsError(t *testing.T) {
	p := newStubPlugin()
	p.onOptions = func(context.Context) error { return status.Error(codes.Internal, "no options today") }
	path := serve(t, p)

	_, err := Dial(context.Background(), "example.com/dev", path, Config{})
	if err == nil || status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "no options today") {
		t.Fatalf("Dial error = %v, want the plugin's Internal error", err)
	}
}

func TestNewStopped(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC))
	e := NewStopped("example.com/dev", Config{Clock: clk})
	if e.Options() != nil {
		t.Errorf("Options() = %v, want nil", e.Options())
	}
	if !e.IsStopped() || !e.StopTime().Equal(clk.Now()) {
		t.Errorf("IsStopped=%v StopTime=%v, want stopped at %v", e.IsStopped(), e.StopTime(), clk.Now())
	}
	if e.ResourceName() != "example.com/dev" || e.SocketPath() != "" {
		t.Errorf("ResourceName=%q SocketPath=%q", e.ResourceName(), e.SocketPath())
	}

	ctx := context.Background()
	calls := map[string]func() error{
		"Allocate": func() error { _, err := e.Allocate(ctx, []string{"a"}); return err },
		"GetPreferredAllocation": func() error {
			_, err := e.GetPreferredAllocation(ctx, []string{"a"}, nil, 1)
			return err
		},
		"PreStartContainer": func() error { _, err := e.PreStartContainer(ctx, []string{"a"}); return err },
		"Run": func() error {
			return e.Run(ctx, func([]*pluginapi.Device) { t.Error("callback on a stopped endpoint") })
		},
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, ErrStopped) {
			t.Errorf("%s: error %v is not ErrStopped", name, err)
		}
		if err == nil || err.Error() != "endpoint example.com/dev has been stopped" {
			t.Errorf("%s: error message %q", name, err)
		}
	}
	e.Stop() // no connection: must not panic, must not move the stop time
	clk.Step(time.Minute)
	e.Stop()
	if !e.StopTime().Equal(clk.Now().Add(-time.Minute)) {
		t.Errorf("Stop moved the stop time to %v", e.StopTime())
	}
}

func TestGracePeriodExpired(t *testing.T) {
	const grace = 5 * time.Minute
	clk := clocktesting.NewFakeClock(time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC))
	e := NewStopped("example.com/dev", Config{Clock: clk})
	if e.GracePeriodExpired(grace) {
		t.Error("expired at once")
	}
	clk.Step(grace)
	if e.GracePeriodExpired(grace) {
		t.Error("expired at exactly the grace period; the kubelet requires strictly more")
	}
	clk.Step(time.Nanosecond)
	if !e.GracePeriodExpired(grace) {
		t.Error("not expired at grace+1ns")
	}
}

func TestStop(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC))
	e := dialStub(t, newStubPlugin(), Config{Clock: clk})

	clk.Step(time.Hour)
	if e.GracePeriodExpired(0) {
		t.Error("a running endpoint's grace period expired")
	}
	stoppedAt := clk.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.Stop()
			_ = e.IsStopped()
			_ = e.GracePeriodExpired(time.Second)
		}()
	}
	wg.Wait()
	clk.Step(time.Minute)
	e.Stop()
	if !e.IsStopped() || !e.StopTime().Equal(stoppedAt) {
		t.Errorf("IsStopped=%v StopTime=%v, want stopped at %v", e.IsStopped(), e.StopTime(), stoppedAt)
	}
	if _, err := e.Allocate(context.Background(), []string{"a"}); !errors.Is(err, ErrStopped) {
		t.Errorf("Allocate after Stop: %v, want ErrStopped", err)
	}
	if e.Options() == nil {
		t.Error("Stop dropped the options")
	}
}

// Stop while an RPC is in flight: the call ends with gRPC's own error text (what the kubelet
// reports when its connection closes under a call), and the error matches ErrStopped.
func TestStopInterruptsRPC(t *testing.T) {
	p := newStubPlugin()
	entered := make(chan struct{})
	p.onAllocate = func(ctx context.Context, _ *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		close(entered)
		return nil, blockUntilDone(ctx)
	}
	e := dialStub(t, p, Config{})

	errc := make(chan error, 1)
	go func() {
		_, err := e.Allocate(context.Background(), []string{"a"})
		errc <- err
	}()
	select {
	case <-entered:
	case <-time.After(waitLimit):
		t.Fatal("Allocate never reached the plugin")
	}
	e.Stop()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrStopped) {
			t.Errorf("interrupted Allocate: %v, want ErrStopped", err)
		}
		code := status.Code(err)
		if err == nil || (code != codes.Canceled && code != codes.Unavailable) ||
			!strings.HasPrefix(err.Error(), "rpc error: code = "+code.String()+" desc = ") {
			t.Errorf("interrupted Allocate: %q (code %v), want gRPC's own Canceled or Unavailable error text", err, code)
		}
		if err != nil && strings.Contains(err.Error(), "stopped") {
			t.Errorf("interrupted Allocate: %q carries a wrapper the kubelet does not give", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Stop did not end the in-flight Allocate")
	}
}

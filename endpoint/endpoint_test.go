package endpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
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

// TestDialNoListener: a socket file that refuses connections is retried until DialTimeout,
// and the error is the kubelet's text exactly (issue 13 item 2); the path and the connect
// error are logged, not returned.
func TestDialNoListener(t *testing.T) {
	dir := socketDir(t)
	stale := staleSocket(t, filepath.Join(dir, "stale.sock"))
	e, err := Dial(context.Background(), "example.com/dev", stale, Config{DialTimeout: 200 * time.Millisecond})
	if err == nil {
		e.Stop()
		t.Fatal("Dial succeeded without a listener")
	}
	if got, want := err.Error(), "failed to dial device plugin: context deadline exceeded"; got != want {
		t.Errorf("error %q, want the kubelet's %q", got, want)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %q is not context.DeadlineExceeded", err)
	}
	if errors.Is(err, ErrSocketMissing) {
		t.Errorf("error %q claims a missing socket; the file exists", err)
	}
}

// TestDialMissingSocket (issue 13 item 9): a path where no file exists fails at once, not at
// DialTimeout, with the kubelet's prefix and the path; so does a socket file deleted while the
// dial waits for it (the manager's start-up cleanup racing a plugin's Register).
func TestDialMissingSocket(t *testing.T) {
	const timeout = 10 * time.Second // the default: a dial that waited for it would fail the test
	dir := socketDir(t)
	cases := map[string]func(t *testing.T) string{
		"never created": func(t *testing.T) string { return filepath.Join(dir, "missing.sock") },
		"deleted while dialling": func(t *testing.T) string {
			path := staleSocket(t, filepath.Join(dir, "deleted.sock"))
			time.AfterFunc(300*time.Millisecond, func() { _ = os.Remove(path) })
			return path
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			path := setup(t)
			start := time.Now()
			e, err := Dial(context.Background(), "example.com/dev", path, Config{DialTimeout: timeout})
			took := time.Since(start)
			if err == nil {
				e.Stop()
				t.Fatal("Dial succeeded without a socket file")
			}
			if want := fmt.Sprintf("failed to dial device plugin: socket %q does not exist", path); err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
			if !errors.Is(err, ErrSocketMissing) || !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("error %q should match ErrSocketMissing and fs.ErrNotExist", err)
			}
			if took > timeout/2 {
				t.Errorf("Dial took %v: it waited for the deadline instead of failing at once", took)
			}
		})
	}
}

// TestDialSocketServedLate: a socket file that refuses connections at first and is then
// served (a plugin still starting) is waited for and connected within the timeout.
func TestDialSocketServedLate(t *testing.T) {
	dir := socketDir(t)
	path := staleSocket(t, filepath.Join(dir, "late.sock"))
	served := serve(t, newStubPlugin())
	// The rename replaces the stale file atomically: the path never disappears.
	time.AfterFunc(200*time.Millisecond, func() { _ = os.Rename(served, path) })
	e, err := Dial(context.Background(), "example.com/dev", path, Config{DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	e.Stop()
}

// staleSocket leaves a socket file at path that nobody listens on (bound, then closed without
// unlinking), so that connect is refused.
func staleSocket(t *testing.T, path string) string {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = lis.Close()
	return path
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

// Command faultplugin is a device plugin built on kdm's SDK that reproduces, one per --fault
// profile, the restart faults seen in real plugins. The conformance tests run `kdm
// conformance` against each profile and expect the matching FAIL or WARN.
//
//	none                  behaves well (4 devices, re-registers, removes its socket on SIGTERM)
//	no-reregister         registers once; when kubelet.sock goes away it never registers again
//	                      and spins a CPU (its watcher closed at once)
//	spin                  re-registers correctly but spins a CPU after kubelet.sock is re-created
//	exit-if-no-manager    exits when kubelet.sock is absent at start
//	exit-on-stream-close  exits when the manager closes its ListAndWatch stream
//	fixed-dir             serves its socket in --fixed-dir, whatever --device-plugin-dir says
//	double-register       sends two Register calls in a row
//	double-register-late  at start only, sends a second Register 500ms after the manager opened
//	                      the first's stream, as a plugin that registers again on a file event
//	                      of its own
//	prestart-mismatch     PreStartRequired in GetDevicePluginOptions only, not in Register
//	two-resources         serves example.com/fault (dev-0..3) and example.com/null (null-0,1)
//	                      from one process; example.com/null registers after example.com/fault,
//	                      every time
//	panic-after-stream-close  once the manager has closed its stream, panics with "send on
//	                      closed channel" right after its next re-registration (a manager restart)
//	exit-before-register  when kubelet.sock is absent at start, retries for 1s, then writes
//	                      "Cannot register to kubelet service" and exits 1 without having
//	                      registered (seen with Intel's GPU plugin; run it under a restart loop)
//	stop-serving-after-close  1.5s after the manager closed its stream, stops serving its
//	                      socket and never registers again, but keeps running (seen with Intel's
//	                      GPU plugin: it stopped serving 2.6s after the close)
//
// The CPU burner under a loaded machine is spin, run while other processes load every CPU.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "faultplugin: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("device-plugin-dir", pluginapi.DevicePluginPath, "directory of kubelet.sock and the plugin socket")
	fault := flag.String("fault", "none", "fault profile")
	fixedDir := flag.String("fixed-dir", "", "where the fixed-dir profile puts its socket")
	flag.Parse()
	kubeletSock := filepath.Join(*dir, "kubelet.sock")
	cfg := deviceplugin.Config{
		ResourceName:    "example.com/fault",
		PluginDir:       *dir,
		KubeletSocket:   kubeletSock,
		KeepRegistering: true,
		RetryBackoff:    100 * time.Millisecond,
		MaxRetryBackoff: time.Second,
	}
	for i := range 4 {
		cfg.Devices = append(cfg.Devices, &pluginapi.Device{ID: fmt.Sprintf("dev-%d", i), Health: pluginapi.Healthy})
	}
	var faults plugintest.Faults
	manual := false // register by hand instead of through the SDK
	switch *fault {
	case "none", "spin":
	case "no-reregister":
		manual = true
	case "exit-if-no-manager":
		if inode(kubeletSock) == "" {
			return fmt.Errorf("kubelet socket %s not found", kubeletSock)
		}
	case "exit-before-register":
		for deadline := time.Now().Add(time.Second); inode(kubeletSock) == ""; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "Cannot register to kubelet service: %s not found after 1s\n", kubeletSock)
				os.Exit(1)
			}
		}
	case "stop-serving-after-close":
	case "exit-on-stream-close":
		faults.ExitOnStreamClose = true
	case "fixed-dir":
		if *fixedDir == "" {
			return errors.New("fixed-dir needs --fixed-dir")
		}
		cfg.PluginDir = *fixedDir
	case "double-register":
		faults.RegisterTwice = true
	case "double-register-late":
		faults.RegisterTwice, faults.SecondRegisterDelay = true, 500*time.Millisecond
	case "two-resources":
	case "panic-after-stream-close":
		faults.ExitOnReregisterAfterStreamClose = true
	case "prestart-mismatch":
		manual = true
		cfg.Options = &pluginapi.DevicePluginOptions{PreStartRequired: true}
	default:
		return fmt.Errorf("unknown fault %q", *fault)
	}
	if manual {
		cfg.Registration = deviceplugin.NoRegistration
	}
	p, err := plugintest.New(cfg)
	if err != nil {
		return err
	}
	p.SetFaults(faults)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *fault == "two-resources" {
		second, err := startSecondResource(ctx, cfg, p)
		if err != nil {
			return err
		}
		defer second.Stop()
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer p.Stop()
	if *fault == "double-register-late" {
		p.SetFaults(plugintest.Faults{}) // only at start, as a plugin started before the kubelet
	}
	req := &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: filepath.Base(p.SocketPath()),
		ResourceName: cfg.ResourceName, Options: &pluginapi.DevicePluginOptions{}}
	switch *fault {
	case "no-reregister":
		if err := register(ctx, kubeletSock, req); err != nil {
			return err
		}
		go func() {
			waitSocketChange(ctx, kubeletSock, inode(kubeletSock))
			spin(ctx) // the broken watcher: never registers again, burns a core
		}()
	case "prestart-mismatch":
		go func() {
			last := ""
			for ctx.Err() == nil {
				if ino := inode(kubeletSock); ino != "" && ino != last {
					if register(ctx, kubeletSock, req) == nil {
						last = ino
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	case "spin":
		go func() {
			waitSocketChange(ctx, kubeletSock, inode(kubeletSock))
			spin(ctx)
		}()
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var stopServing <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-stopServing:
			fmt.Fprintln(os.Stderr, "faultplugin: stopped serving its socket; still running")
			p.Stop()
			<-ctx.Done() // alive, serving nothing, never registering again
			return nil
		case <-tick.C:
			if *fault == "stop-serving-after-close" && stopServing == nil && p.Calls().StreamsClosedByManager > 0 {
				stopServing = time.After(1500 * time.Millisecond)
			}
			err := p.Exited()
			if err != nil && *fault == "panic-after-stream-close" {
				sendOnClosed() // the crash this profile reproduces
			}
			if err != nil {
				return err
			}
		}
	}
}

// startSecondResource serves example.com/null from this process beside first and registers it
// after each of first's registrations, in that order, retrying until the manager accepts it.
func startSecondResource(ctx context.Context, cfg deviceplugin.Config, first *plugintest.Plugin) (*plugintest.Plugin, error) {
	cfg.ResourceName = "example.com/null"
	cfg.Registration = deviceplugin.NoRegistration
	cfg.Devices = nil
	for i := range 2 {
		cfg.Devices = append(cfg.Devices, &pluginapi.Device{ID: fmt.Sprintf("null-%d", i), Health: pluginapi.Healthy})
	}
	p, err := plugintest.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := p.Start(ctx); err != nil {
		return nil, err
	}
	req := &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: filepath.Base(p.SocketPath()),
		ResourceName: cfg.ResourceName, Options: &pluginapi.DevicePluginOptions{}}
	go func() {
		for n := 1; ; n++ {
			if first.WaitForRegistrations(ctx, n) != nil {
				return
			}
			for ctx.Err() == nil && register(ctx, cfg.KubeletSocket, req) != nil {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
	return p, nil
}

// sendOnClosed panics as a scanner does that sends to the channel of a stream that is gone.
func sendOnClosed() {
	ch := make(chan []string, 1)
	close(ch)
	ch <- nil
}

// register sends one Register call to the manager at sock.
func register(ctx context.Context, sock string, req *pluginapi.RegisterRequest) error {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, req, grpc.WaitForReady(true))
	return err
}

// inode identifies the file at path by inode number and change time (an inode number alone
// is reused when a socket is re-created at once), or returns "" if nothing is there.
func inode(path string) string {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
}

// waitSocketChange returns once path no longer has inode ino (removed or re-created).
func waitSocketChange(ctx context.Context, path string, ino string) {
	for ctx.Err() == nil && inode(path) == ino {
		time.Sleep(50 * time.Millisecond)
	}
}

var sink atomic.Uint64

// spin busy-loops until ctx ends.
func spin(ctx context.Context) {
	for ctx.Err() == nil {
		for i := 0; i < 1_000_000; i++ {
			sink.Add(1)
		}
	}
}

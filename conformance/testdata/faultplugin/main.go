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
//	prestart-mismatch     PreStartRequired in GetDevicePluginOptions only, not in Register
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
	var faults deviceplugin.Faults
	manual := false // register by hand instead of through the SDK
	switch *fault {
	case "none", "spin":
	case "no-reregister":
		manual = true
	case "exit-if-no-manager":
		if inode(kubeletSock) == "" {
			return fmt.Errorf("kubelet socket %s not found", kubeletSock)
		}
	case "exit-on-stream-close":
		faults.ExitOnStreamClose = true
	case "fixed-dir":
		if *fixedDir == "" {
			return errors.New("fixed-dir needs --fixed-dir")
		}
		cfg.PluginDir = *fixedDir
	case "double-register":
		faults.RegisterTwice = true
	case "prestart-mismatch":
		manual = true
		cfg.Options = &pluginapi.DevicePluginOptions{PreStartRequired: true}
	default:
		return fmt.Errorf("unknown fault %q", *fault)
	}
	if manual {
		cfg.Registration = deviceplugin.NoRegistration
	}
	p, err := deviceplugin.New(cfg)
	if err != nil {
		return err
	}
	p.SetFaults(faults)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer p.Stop()
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
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := p.Exited(); err != nil {
				return err
			}
		}
	}
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

// Command hostile is the end-to-end tests' hostile local client, run as many separate
// processes: a registrant whose plugin socket never answers, a device plugin whose options
// answer late, or HTTP clients that never finish their requests. It runs until killed and
// prints "held" on stdout once its attack is in place.
//
//	hostile register-silent -plugin-dir D -socket S -resource R
//	hostile slow-plugin -plugin-dir D -socket S -resource R -devices N -options-delay 300ms
//	hostile slowloris -addr HOST:PORT -conns N
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hostile register-silent|slow-plugin|slowloris [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("plugin-dir", "", "device plugin directory (kubelet.sock's)")
	socket := fs.String("socket", "", "plugin socket name in -plugin-dir")
	resource := fs.String("resource", "", "resource name to register")
	devices := fs.Int("devices", 4, "devices the slow plugin advertises")
	delay := fs.Duration("options-delay", 300*time.Millisecond, "how late the slow plugin answers GetDevicePluginOptions")
	addr := fs.String("addr", "", "HTTP address to hold connections to")
	conns := fs.Int("conns", 200, "HTTP connections to hold")
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "register-silent":
		err = registerSilent(*dir, *socket, *resource)
	case "slow-plugin":
		err = slowPlugin(*dir, *socket, *resource, *devices, *delay)
	case "slowloris":
		err = slowloris(*addr, *conns)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// registerSilent listens on dir/socket, accepting connections and never answering them, and
// registers it on dir/kubelet.sock again and again, at once after each answer, as a plugin
// that retries without backoff. It prints "held" when the manager first connects to it.
func registerSilent(dir, socket, resource string) error {
	lis, err := net.Listen("unix", filepath.Join(dir, socket))
	if err != nil {
		return err
	}
	var once sync.Once
	go func() {
		var held []net.Conn
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
			once.Do(func() { fmt.Println("held") })
		}
	}()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	client := pluginapi.NewRegistrationClient(conn)
	for {
		start := time.Now()
		_, _ = client.Register(context.Background(), &pluginapi.RegisterRequest{Version: pluginapi.Version,
			ResourceName: resource, Endpoint: socket})
		if time.Since(start) < time.Millisecond {
			time.Sleep(10 * time.Millisecond) // kubelet.sock not there: do not spin
		}
	}
}

// slowPlugin serves resource on dir/socket with the SDK, registering with retries as a
// long-running plugin does, and answers GetDevicePluginOptions after delay.
func slowPlugin(dir, socket, resource string, devices int, delay time.Duration) error {
	var devs []*pluginapi.Device
	for i := range devices {
		devs = append(devs, &pluginapi.Device{ID: fmt.Sprintf("dev-%d", i), Health: pluginapi.Healthy})
	}
	p, err := deviceplugin.New(deviceplugin.Config{ResourceName: resource, PluginDir: dir, SocketName: socket,
		Devices: devs, KeepRegistering: true,
		UnaryInterceptor: func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if strings.HasSuffix(info.FullMethod, "/GetDevicePluginOptions") {
				time.Sleep(delay)
			}
			return h(ctx, req)
		}})
	if err != nil {
		return err
	}
	if err := p.Start(context.Background()); err != nil {
		return err
	}
	fmt.Println("held")
	<-p.Done()
	return nil
}

// slowloris keeps conns connections to addr, each sending the start of a request and then one
// header line every second, never finishing it; a connection the server closes is replaced
// at once. It prints "held" once all are open.
func slowloris(addr string, conns int) error {
	var open atomic.Int64
	var once sync.Once
	for i := range conns {
		go func() {
			for {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if open.Add(1) == int64(conns) {
					once.Do(func() { fmt.Println("held") })
				}
				_, err = fmt.Fprintf(c, "GET /status?c=%d HTTP/1.1\r\nHost: %s\r\n", i, addr)
				for err == nil {
					time.Sleep(time.Second)
					_, err = fmt.Fprintf(c, "X-Slow: %d\r\n", time.Now().UnixNano())
				}
				_ = c.Close()
			}
		}()
	}
	select {}
}

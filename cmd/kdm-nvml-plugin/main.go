// Command kdm-nvml-plugin is kdm's reference NVIDIA GPU device plugin. It works with kdm and
// with a kubelet alike: it serves the device-plugin API on a socket in the device-plugin
// directory and registers through kubelet.sock, again whenever kubelet.sock is re-created.
//
//	kdm-nvml-plugin                       # real GPUs through libnvidia-ml
//	kdm-nvml-plugin --mock dgxa100        # eight mock A100s (go-nvml's mock), no GPU needed
//
// Two copies side by side (say, two resource names) need two socket names (--socket-name);
// a copy whose socket path is held by a live plugin refuses to start and leaves it alone.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin/nvml"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("kdm-nvml-plugin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mock := fs.String("mock", "", "run on mock GPUs instead of libnvidia-ml: dgxa100")
	dir := fs.String("device-plugin-dir", pluginapi.DevicePluginPath, "directory of kubelet.sock and the plugin socket")
	resource := fs.String("resource-name", nvml.DefaultResourceName, "extended resource to advertise")
	socket := fs.String("socket-name", nvml.DefaultSocketName, "file name of the plugin's socket in --device-plugin-dir (a plain name, no \"/\"); give each copy that runs beside another its own: a copy refuses to start where a live plugin already listens")
	cdi := fs.Bool("cdi", false, "answer Allocate with CDI device names (nvidia.com/gpu=<uuid>)")
	healthDir := fs.String("health-control-dir", "", "directory of files named after GPU UUIDs holding Unhealthy or Healthy")
	sysfs := fs.String("sysfs-root", nvml.DefaultSysfsRoot, "sysfs root, for GPUs' NUMA nodes")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "log verbosity")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	p, err := nvml.New(nvml.Config{Mock: *mock, PluginDir: *dir, ResourceName: *resource, SocketName: *socket, CDI: *cdi,
		HealthControlDir: *healthDir, SysfsRoot: *sysfs, Logger: klog.Background()})
	if err != nil {
		fmt.Fprintf(stderr, "kdm-nvml-plugin: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := p.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "kdm-nvml-plugin: %v\n", err)
		return 1
	}
	klog.Flush()
	return 0
}

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
	"errors"
	goflag "flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin/nvml"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usage is the text above the flags in --help.
const usage = `usage: kdm-nvml-plugin [flags]

kdm's reference NVIDIA GPU device plugin: it advertises the node's GPUs (libnvidia-ml, or eight
mock A100s with --mock dgxa100) to kdm or a kubelet through the device-plugin API, answers
Allocate with NVIDIA_VISIBLE_DEVICES and device nodes (or CDI names with --cdi), and registers
again whenever kubelet.sock is re-created. It stops on SIGTERM or SIGINT.

flags:
`

// run parses the command line and runs the plugin until a signal stops it. It returns the exit
// code: 0 after a clean stop or --help (usage on stdout), 2 for a bad command line (what was
// wrong on stderr), 1 for a failure.
func run(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("kdm-nvml-plugin", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(stdout) // pflag itself prints only the usage, when asked for
	mock := fs.String("mock", "", "run on mock GPUs instead of libnvidia-ml: dgxa100")
	mockGPUs := fs.Int("mock-gpus", 0, "with --mock, how many mock A100s (1 to 64); 0: the DGX A100's eight")
	dir := fs.String("device-plugin-dir", pluginapi.DevicePluginPath, "directory of kubelet.sock and the plugin socket")
	resource := fs.String("resource-name", nvml.DefaultResourceName, "extended resource to advertise")
	socket := fs.String("socket-name", nvml.DefaultSocketName, "file name of the plugin's socket in --device-plugin-dir (a plain name, no \"/\"); give each copy that runs beside another its own: a copy refuses to start where a live plugin already listens")
	cdi := fs.Bool("cdi", false, "answer Allocate with CDI device names (nvidia.com/gpu=<uuid>)")
	devDir := fs.String("device-dir", "/dev", "host directory of the GPUs' device nodes (nvidia<N>, nvidiactl, nvidia-uvm, nvidia-uvm-tools); in the container they are under /dev")
	healthDir := fs.String("health-control-dir", "", "directory of files named after GPU UUIDs holding Unhealthy or Healthy")
	sysfs := fs.String("sysfs-root", nvml.DefaultSysfsRoot, "sysfs root, for GPUs' NUMA nodes")
	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	v := pflag.PFlagFromGoFlag(klogFlags.Lookup("v")) // -v N and --v=N
	v.Usage = "log verbosity"
	fs.AddFlag(v)
	fs.Usage = func() {
		fmt.Fprint(stdout, usage)
		fmt.Fprint(stdout, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		hint := ""
		for _, a := range args {
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
			if a == "--" {
				break
			}
			if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && len(name) > 1 && fs.Lookup(name) != nil {
				hint = " (long flags take two dashes: --" + name + ")"
				break
			}
		}
		fmt.Fprintf(stderr, "kdm-nvml-plugin: %v%s\nRun 'kdm-nvml-plugin --help' for usage.\n", err, hint)
		return 2
	}
	if fs.NArg() > 0 {
		quoted := make([]string, fs.NArg())
		for i, a := range fs.Args() {
			quoted[i] = strconv.Quote(a)
		}
		fmt.Fprintf(stderr, "kdm-nvml-plugin: expected no arguments, got %d: %s\nRun 'kdm-nvml-plugin --help' for usage.\n", fs.NArg(), strings.Join(quoted, " "))
		return 2
	}
	p, err := nvml.New(nvml.Config{Mock: *mock, MockGPUs: *mockGPUs, PluginDir: *dir, ResourceName: *resource, SocketName: *socket, CDI: *cdi,
		DeviceDir: *devDir, HealthControlDir: *healthDir, SysfsRoot: *sysfs, Logger: klog.Background()})
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

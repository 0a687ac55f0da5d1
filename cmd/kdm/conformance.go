package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/conformance"
)

// isolatedEnv carries, into the re-executed child of --isolate, the temporary directory to
// bind-mount over the kubelet's device-plugin directory.
const isolatedEnv = "KDM_CONFORMANCE_ISOLATED_DIR"

// conformanceAbout is the description in `kdm conformance --help`.
const conformanceAbout = `Starts the device plugin command, plays the kubelet's device manager against it on a temporary
device-plugin directory, and runs the conformance checks (registration, ListAndWatch, Allocate,
manager restart, manager absent at start, stream close, duplicate registrations, idle CPU,
SIGTERM, health), each resource of a plugin that serves several apart, each check from a fresh
plugin process unless it names the check it depends on. A plugin process that dies (a restart
loop's children included, registered or not) fails the check during which it died, with its
PID, exit status and the stderr lines it wrote as evidence; under a WARN or FAIL the table
shows the kubelet behaviour the verdict rests on (docs/conformance.md). A check whose own step
failed (a health trigger command killed) is ERROR, not FAIL.
The plugin learns the directory through --dir-flag, --dir-env, a "{dir}"
argument, or, for plugins that hard-code /var/lib/kubelet/device-plugins, --isolate (root).
Exit status: 0 when no check fails, 1 when one does, 3 when none fails but one is ERROR,
2 on usage or set-up errors.`

func runConformance(args []string, stdout, stderr io.Writer) int {
	c := newCommand("kdm conformance", "kdm conformance [flags] -- PLUGIN-COMMAND [ARGS...]", conformanceAbout, stdout, stderr)
	fs := c.flags
	fs.SetInterspersed(false) // everything from the plugin command on is the plugin's
	dirFlag := fs.String("dir-flag", "", "pass the directory to the plugin as --`NAME`=DIR")
	dirEnv := fs.String("dir-env", "", "pass the directory to the plugin in environment variable `NAME`")
	dir := fs.String("dir", "", "use this device-plugin directory instead of a temporary one (its sockets are removed)")
	isolate := fs.Bool("isolate", false, "root only: run in a private mount namespace with a temporary directory bind-mounted over "+pluginapi.DevicePluginPath)
	asJSON := fs.Bool("json", false, "print the report as JSON (schema: docs/conformance.md) instead of a table")
	junit := fs.String("junit", "", "also write a JUnit XML report to `FILE`")
	trigger := fs.String("health-trigger", "", "shell `CMD` that makes device $KDM_CONFORMANCE_DEVICE of $KDM_CONFORMANCE_RESOURCE unhealthy (enables check 10)")
	restore := fs.String("health-restore", "", "shell `CMD` that makes device $KDM_CONFORMANCE_DEVICE healthy again")
	pluginLog := fs.String("plugin-log", "", "write the plugin's output to `FILE` (\"-\": stderr); default: discarded")
	verbose := fs.IntP("v", "v", 0, "log verbosity of the manager probe (to stderr)")
	def := conformance.DefaultTimings()
	cpuWindow := fs.Duration("cpu-window", def.CPUWindow, "idle CPU window after the manager restart (check 8)")
	managerDelay := fs.Duration("manager-delay", def.ManagerDelay, "how long the manager stays absent after the plugin starts (check 5)")
	closeWindow := fs.Duration("stream-close-window", def.StreamCloseWindow, "how long the plugin is watched after its stream is closed (check 6)")
	c.more = func(w io.Writer) {
		fmt.Fprintln(w, "checks:")
		for _, c := range conformance.Checks() {
			fmt.Fprintf(w, "  %2d %-24s %s\n", c.ID, c.Name, c.Title)
		}
	}
	if code, ok := c.parse(args); !ok {
		return code
	}
	command := fs.Args()
	if len(command) == 0 {
		return c.misuse("no plugin command given (put it after --)")
	}
	isolatedDir := os.Getenv(isolatedEnv)
	if *isolate && isolatedDir == "" {
		return reexecIsolated(args, stdout, stderr)
	}

	cfg := conformance.Config{Command: command, DirFlag: *dirFlag, DirEnv: *dirEnv, HealthTrigger: *trigger,
		HealthRestore: *restore, Timings: conformance.Timings{CPUWindow: *cpuWindow, ManagerDelay: *managerDelay,
			StreamCloseWindow: *closeWindow}}
	switch {
	case isolatedDir != "":
		if err := bindPluginDir(isolatedDir); err != nil {
			fmt.Fprintf(stderr, "kdm conformance: --isolate: %v\n", err)
			return 2
		}
		cfg.Dir = filepath.Clean(pluginapi.DevicePluginPath)
	case *dir != "":
		cfg.Dir = *dir
	default:
		tmp, err := os.MkdirTemp("", "kdmc-")
		if err != nil {
			fmt.Fprintf(stderr, "kdm conformance: %v\n", err)
			return 2
		}
		defer func() { _ = os.RemoveAll(tmp) }()
		cfg.Dir = tmp
	}
	switch *pluginLog {
	case "":
	case "-":
		cfg.PluginOutput = stderr
	default:
		f, err := os.Create(*pluginLog)
		if err != nil {
			fmt.Fprintf(stderr, "kdm conformance: %v\n", err)
			return 2
		}
		defer func() { _ = f.Close() }()
		cfg.PluginOutput = f
	}
	if *verbose > 0 {
		cfg.Logger = textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(*verbose), textlogger.Output(stderr)))
	} else {
		cfg.Logger = klog.LoggerWithName(klog.Background(), "conformance").V(100)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := conformance.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kdm conformance: %v\n", err)
		return 2
	}
	if *asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kdm conformance: writing the report: %v\n", err)
		return 2
	}
	if *junit != "" {
		if err := writeJUnit(*junit, rep); err != nil {
			fmt.Fprintf(stderr, "kdm conformance: %v\n", err)
			return 2
		}
	}
	return rep.ExitCode()
}

func writeJUnit(path string, rep *conformance.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteJUnit(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// reexecIsolated runs this same command again in a new mount namespace (mounts private from
// the host), passing it a fresh temporary directory to bind-mount over the kubelet's
// device-plugin directory, and returns its exit status. Only root may do this.
func reexecIsolated(args []string, stdout, stderr io.Writer) int {
	if os.Geteuid() != 0 {
		fmt.Fprintf(stderr, "kdm conformance: --isolate needs root (it creates a private mount namespace and bind-mounts a temporary directory over %s); run as root, or give the plugin the directory with --dir-flag or --dir-env\n",
			pluginapi.DevicePluginPath)
		return 2
	}
	tmp, err := os.MkdirTemp("", "kdmc-isolated-")
	if err != nil {
		fmt.Fprintf(stderr, "kdm conformance: %v\n", err)
		return 2
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "kdm conformance: finding the kdm binary: %v\n", err)
		return 2
	}
	cmd := exec.Command(self, append([]string{"conformance"}, args...)...)
	cmd.Env = append(os.Environ(), isolatedEnv+"="+tmp)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	// Go makes every mount private (MS_REC|MS_PRIVATE on /) in a child unshared with
	// CLONE_NEWNS, so the bind mount below never reaches the host.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintf(stderr, "kdm conformance: --isolate: %v\n", err)
		return 2
	}
	return 0
}

// bindPluginDir bind-mounts dir over the kubelet's device-plugin directory, creating the
// mount point if needed. It must run inside the private mount namespace.
func bindPluginDir(dir string) error {
	if err := os.MkdirAll(pluginapi.DevicePluginPath, 0o750); err != nil {
		return fmt.Errorf("creating the mount point: %w", err)
	}
	if err := syscall.Mount(dir, pluginapi.DevicePluginPath, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s over %s: %w", dir, pluginapi.DevicePluginPath, err)
	}
	return nil
}

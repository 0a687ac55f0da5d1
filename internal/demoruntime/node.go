package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kdm-project/kdm/internal/containerdtest"
)

// demo is one run; its directory dir holds containerd's root, state, socket and config, the
// images' tarballs, the device nodes, kdm's directories and every process's log.
type demo struct {
	out   io.Writer
	start time.Time
	gpus  int
	bins  []string // kdm, kdm-nvml-plugin
	dir   string
	ctd   *containerdtest.Containerd
	procs []*proc // started processes, in order
	// addr is kdm's HTTP endpoint (--healthz-bind-address).
	addr string
}

// proc is a started process and where its output goes.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

func missingPrograms() []string { return containerdtest.Missing() }

func (d *demo) path(elem ...string) string { return filepath.Join(append([]string{d.dir}, elem...)...) }

// startContainerd starts the private containerd on the configuration it writes.
func (d *demo) startContainerd(context.Context) error {
	dir := d.path("containerd")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	c, err := containerdtest.Launch(dir)
	if err != nil {
		return fmt.Errorf("starting containerd: %w", err)
	}
	d.ctd = c
	d.say("containerd started: containerd --config %s (its own root, state and socket %s;\n"+
		"         the config sets sandbox_image and restrict_oom_score_adj, which Debian's default config lacks)",
		filepath.Join(dir, "config.toml"), c.Socket())
	return nil
}

// importImages builds the probe image as an OCI tarball and imports it twice: as the container
// image and as the sandbox (pause) image, which the probe also serves as.
func (d *demo) importImages(context.Context) error {
	d.say("building the probe image from internal/containerdtest/probe (a static Go program; no registry)")
	tarBytes, err := containerdtest.BuildImageTar(containerdtest.ProbeImage, containerdtest.ProbePackage)
	if err != nil {
		return err
	}
	sandbox, err := containerdtest.BuildImageTar(containerdtest.SandboxImage, containerdtest.ProbePackage)
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{"probe.tar": tarBytes, "sandbox.tar": sandbox} {
		p := d.path(name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return err
		}
		if err := d.ctd.ImportTar(p); err != nil {
			return err
		}
		d.say("imported %s (%d KiB): ctr -a %s -n k8s.io images import %s", name, len(b)/1024, d.ctd.Socket(), p)
	}
	return nil
}

// makeDeviceNodes makes character devices for the mock DGX A100: nvidia<minor> with the NVIDIA
// driver's major 195, nvidiactl (195:255) and the UVM nodes. No driver answers behind them;
// they exist so that the runtime can hand them to containers as a real node's would.
func (d *demo) makeDeviceNodes(context.Context) error {
	dev := d.path("dev")
	if err := os.Mkdir(dev, 0o755); err != nil {
		return err
	}
	nodes := map[string][2]uint32{"nvidiactl": {195, 255}, "nvidia-uvm": {510, 0}, "nvidia-uvm-tools": {510, 1}}
	for i := range 8 {
		nodes[fmt.Sprintf("nvidia%d", i)] = [2]uint32{195, uint32(i)}
	}
	for name, mm := range nodes {
		if err := unix.Mknod(filepath.Join(dev, name), unix.S_IFCHR|0o666, int(unix.Mkdev(mm[0], mm[1]))); err != nil {
			return fmt.Errorf("mknod %s: %w", name, err)
		}
	}
	d.say("made the mock GPUs' device nodes in %s (mknod nvidia0..7 c 195 N, nvidiactl c 195 255, nvidia-uvm*)", dev)
	return nil
}

// startKdm starts kdm with the runtime, then the GPU plugin, and waits for the 8 GPUs.
func (d *demo) startKdm(ctx context.Context) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	d.addr = l.Addr().String()
	l.Close()
	for _, p := range []string{"kubelet", "device-plugins", "manifests"} {
		if err := os.Mkdir(d.path(p), 0o755); err != nil {
			return err
		}
	}
	args := []string{"run", "--root-dir", d.path("kubelet"), "--device-plugin-dir", d.path("device-plugins"),
		"--pod-manifest-path", d.path("manifests"), "--healthz-bind-address", d.addr,
		"--container-runtime-endpoint", d.ctd.Endpoint(), "--pod-infra-container-image", containerdtest.SandboxImage}
	if err := d.startProc("kdm", d.bins[0], args...); err != nil {
		return err
	}
	d.say("kdm started: kdm %s", strings.Join(args, " "))
	if err := d.waitFile(ctx, d.path("device-plugins", "kubelet.sock")); err != nil {
		return err
	}
	pargs := []string{"--mock", "dgxa100", "--device-plugin-dir", d.path("device-plugins"), "--device-dir", d.path("dev")}
	if err := d.startProc("kdm-nvml-plugin", d.bins[1], pargs...); err != nil {
		return err
	}
	d.say("GPU plugin started: kdm-nvml-plugin %s", strings.Join(pargs, " "))
	if err := d.waitResource(ctx, "8 GPUs free", func(r resource) bool { return r.Devices == 8 && r.Free == 8 }); err != nil {
		return err
	}
	d.say("kdm advertises 8 GPUs, all free; its policy: %s", d.policyLine())
	return nil
}

// startProc starts a process whose output goes to <dir>/<name>.log.
func (d *demo) startProc(name, bin string, args ...string) error {
	logPath := d.path(name + ".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	d.procs = append(d.procs, p)
	return nil
}

// waitFile waits for path to exist, failing early when a process exits.
func (d *demo) waitFile(ctx context.Context, path string) error {
	return d.poll(ctx, "waiting for "+path, func() (bool, error) {
		_, err := os.Stat(path)
		return err == nil, nil
	})
}

// poll calls cond every 100 ms until it holds, it fails, a started process exits or ctx ends.
func (d *demo) poll(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		for _, p := range d.procs {
			select {
			case <-p.exited:
				return fmt.Errorf("%s: %s exited: %v", what, p.name, p.cmd.ProcessState)
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// cleanup stops the processes (SIGTERM, newest first), then containerd, and removes the
// directory unless keep.
func (d *demo) cleanup(keep bool) error {
	var errs []error
	for i := len(d.procs) - 1; i >= 0; i-- {
		p := d.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			errs = append(errs, fmt.Errorf("%s did not stop within 30s of SIGTERM; killed", p.name))
		}
	}
	if len(d.procs) > 0 {
		d.say("stopped kdm and the GPU plugin")
	}
	if d.ctd != nil {
		// Close removes containerd's directory with it.
		if err := d.ctd.Close(); err != nil {
			errs = append(errs, err)
		}
		d.say("stopped containerd, its shims and mounts")
	}
	if keep {
		d.say("kept %s", d.dir)
	} else if err := os.RemoveAll(d.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// dumpLogs prints the tail of each process's log, after a failure.
func (d *demo) dumpLogs() {
	for _, p := range d.procs {
		b, _ := os.ReadFile(p.log)
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		fmt.Fprintf(d.out, "--- the end of %s ---\n%s\n", p.log, b)
	}
}

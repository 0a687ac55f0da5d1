// Command demoruntime is `make demo-runtime`: a GPU pod run as a real container, from nothing
// but this repository and Debian's packages.
//
// It installs Debian's containerd and runc when they are missing (apt-get; root), starts a
// private containerd (its own root, state, socket and a config it writes, in one temporary
// directory), builds the probe image locally as an OCI tarball and imports it with
// `ctr images import` (no registry), makes device nodes for the mock GPUs (the go-nvml mock has
// none: mknod, then the plugin's --device-dir), runs kdm and the reference GPU plugin as
// processes, places the manifest of a pod asking for two GPUs, prints what its container saw
// (device nodes and environment, from its log), waits for it to finish and shows its GPUs free
// again. Then it stops everything it started and removes the directory (--keep keeps it).
//
// Every step is printed with the command an operator would run for it; docs/container-runtime.md
// walks the same steps on a real node.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding the kdm and kdm-nvml-plugin binaries")
	keep := flag.Bool("keep", false, "keep the demo's directory (containerd's is removed with it otherwise)")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up after this long")
	gpus := flag.Int("gpus", 2, "GPUs the demo pod asks for (1 to 8)")
	flag.Parse()
	if *gpus < 1 || *gpus > 8 {
		fmt.Fprintf(os.Stderr, "demoruntime: --gpus must be 1 to 8, got %d\n", *gpus)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, *bin, *gpus, *keep); err != nil {
		fmt.Fprintf(os.Stderr, "demo-runtime: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, bin string, gpus int, keep bool) (err error) {
	d := &demo{out: out, start: time.Now(), gpus: gpus}
	for _, b := range []string{"kdm", "kdm-nvml-plugin"} {
		p, err := filepath.Abs(filepath.Join(bin, b))
		if err != nil {
			return err
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s: build it first (make demo-runtime does): %w", p, err)
		}
		d.bins = append(d.bins, p)
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root: containerd, mknod and apt-get do (run it as root, or with sudo)")
	}
	fmt.Fprintf(out, "kdm demo-runtime: a GPU pod as a real container: containerd and runc from Debian, a locally built image,\n"+
		"eight mock A100 GPUs with device nodes, kdm and its reference GPU plugin as processes.\n\n")
	if err := d.ensurePackages(ctx); err != nil {
		return err
	}
	// A short directory: containerd's socket path must fit in 108 bytes.
	d.dir, err = os.MkdirTemp("", "kdm-rt-")
	if err != nil {
		return err
	}
	defer func() {
		if cerr := d.cleanup(keep); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up: %w", cerr))
		}
	}()
	steps := []func(context.Context) error{d.startContainerd, d.importImages, d.makeDeviceNodes, d.startKdm, d.runPod}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			d.dumpLogs()
			return err
		}
	}
	d.say("done in %s", time.Since(d.start).Round(100*time.Millisecond))
	return nil
}

// ensurePackages installs Debian's containerd and runc when a program is missing.
func (d *demo) ensurePackages(ctx context.Context) error {
	missing := missingPrograms()
	if len(missing) == 0 {
		d.say("containerd, containerd-shim-runc-v2, runc and ctr are installed")
		return nil
	}
	d.say("missing %v: apt-get install -y --no-install-recommends containerd runc", missing)
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("%v missing and no apt-get here: install containerd (1.6 or later) and runc", missing)
	}
	for _, args := range [][]string{{"update"}, {"install", "-y", "--no-install-recommends", "containerd", "runc"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = d.out, d.out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %v: %w", args, err)
		}
	}
	// Debian's package starts the system's containerd under systemd where systemd runs; the demo
	// does not use it: it runs its own.
	if missing := missingPrograms(); len(missing) > 0 {
		return fmt.Errorf("still missing after apt-get: %v", missing)
	}
	return nil
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%5.1fs] "+format+"\n", append([]any{time.Since(d.start).Seconds()}, args...)...)
}

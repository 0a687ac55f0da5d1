// Package containerdtest starts a private containerd for tests and builds registry-free images
// for it.
//
// Start (Launch outside tests) runs containerd (Debian's 1.6 works) with its root, state, socket and runc root in a
// fresh temporary directory, the CRI plugin configured for the host network (no CNI) and
// restrict_oom_score_adj (without it runc cannot start a container in an unprivileged
// sandbox). The test fails, never skips, when containerd, runc or ctr is missing. Cleanup removes
// every sandbox and container through CRI, stops containerd, kills the shims of its socket
// (they outlive containerd) and unmounts what is left under its directories.
//
// BuildImage builds a static Go main package into a one-layer OCI image-layout tar; Import loads
// one into containerd's k8s.io namespace, where CRI finds it. ImportProbe does both for the probe
// program (./probe), which serves as the sandbox image as well.
package containerdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// SandboxImage is the sandbox (pause) image name every Containerd is configured with;
// ImportProbe imports the probe under this name.
const SandboxImage = "kdm.test/sandbox:1"

// ProbeImage is the name ImportProbe imports the probe image under.
const ProbeImage = "kdm.test/probe:1"

// Containerd is a running private containerd.
type Containerd struct {
	dir     string // the temporary directory holding everything
	sock    string
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

// binaries containerd needs, with the places Debian installs them when PATH lacks them.
var binaries = map[string][]string{
	"containerd":              {"/usr/bin/containerd"},
	"containerd-shim-runc-v2": {"/usr/bin/containerd-shim-runc-v2"},
	"runc":                    {"/usr/sbin/runc", "/usr/bin/runc"},
	"ctr":                     {"/usr/bin/ctr"},
}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, p := range binaries[name] {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or %v (install Debian's containerd and runc: apt-get install containerd runc)", name, binaries[name])
}

// Start starts a private containerd and registers its cleanup with t.Cleanup. It fails the
// test when containerd cannot run here.
func Start(t testing.TB) *Containerd {
	t.Helper()
	// A short directory: the socket path must fit in a sockaddr_un (108 bytes), which
	// t.TempDir() with a long test name does not promise.
	dir, err := os.MkdirTemp("", "ctd")
	if err != nil {
		t.Fatalf("containerdtest: %v", err)
	}
	c, err := Launch(dir)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("containerdtest: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("containerdtest: %v", err)
		}
	})
	return c
}

// Missing names the programs a private containerd needs that are neither in PATH nor where
// Debian installs them: containerd, containerd-shim-runc-v2, runc and ctr.
func Missing() []string {
	var missing []string
	for name := range binaries {
		if _, err := lookPath(name); err != nil {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	return missing
}

// Config is the containerd configuration Launch writes for a containerd whose root, state,
// socket, runc root and (empty) CNI directories are under dir, running containers with the
// runc at runcPath and SandboxImage as the pod sandbox image.
func Config(dir, runcPath string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[5]q
    conf_dir = %[6]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      BinaryName = %[7]q
      Root = %[8]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), filepath.Join(dir, "containerd.sock"), SandboxImage,
		filepath.Join(dir, "cni/bin"), filepath.Join(dir, "cni/conf"), runcPath, filepath.Join(dir, "runc"))
}

// Launch starts a private containerd in dir (an existing directory with a short path: the
// socket's must fit in 108 bytes), writing its configuration (Config) to dir/config.toml and its
// log to dir/containerd.log, and waits up to 30 s for it to answer CRI. The caller must Close
// it; on an error nothing is left running.
func Launch(dir string) (*Containerd, error) {
	paths := map[string]string{}
	for name := range binaries {
		p, err := lookPath(name)
		if err != nil {
			return nil, err
		}
		paths[name] = p
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("containerd needs root (euid %d)", os.Geteuid())
	}
	c := &Containerd{
		dir:     dir,
		sock:    filepath.Join(dir, "containerd.sock"),
		exited:  make(chan struct{}),
		logPath: filepath.Join(dir, "containerd.log"),
	}
	for _, d := range []string{"root", "state", "runc", "cni/bin", "cni/conf"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(Config(dir, paths["runc"])), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(c.logPath)
	if err != nil {
		return nil, err
	}
	c.cmd = exec.Command(paths["containerd"], "--config", cfgPath)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	// The shims find containerd-shim-runc-v2 and runc through PATH.
	c.cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH")+":/usr/sbin:/usr/bin:/sbin:/bin")
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	go func() {
		_ = c.cmd.Wait()
		logf.Close()
		close(c.exited)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		err := c.ping(ctx)
		if err == nil {
			return c, nil
		}
		select {
		case <-c.exited:
			return nil, errors.Join(fmt.Errorf("containerd exited: %v\n%s", c.cmd.ProcessState, c.log()), c.Close())
		case <-ctx.Done():
			err = fmt.Errorf("containerd did not answer on %s: %v\n%s", c.sock, err, c.log())
			return nil, errors.Join(err, c.Close())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Endpoint is the CRI endpoint, "unix:///.../containerd.sock".
func (c *Containerd) Endpoint() string { return "unix://" + c.sock }

// Socket is the path of containerd's socket.
func (c *Containerd) Socket() string { return c.sock }

// Dir is the temporary directory holding containerd's root, state and socket.
func (c *Containerd) Dir() string { return c.dir }

// Dial returns a CRI runtime client and closes its connection at the test's cleanup.
func (c *Containerd) Dial(t testing.TB) cri.RuntimeServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(c.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("containerdtest: dial %s: %v", c.Endpoint(), err)
	}
	t.Cleanup(func() { conn.Close() })
	return cri.NewRuntimeServiceClient(conn)
}

// Import imports an OCI image-layout tar into the k8s.io namespace, where CRI finds it.
func (c *Containerd) Import(t testing.TB, tarPath string) {
	t.Helper()
	if err := c.ImportTar(tarPath); err != nil {
		t.Fatalf("containerdtest: %v", err)
	}
}

// ImportTar is Import returning its error: `ctr -a <socket> -n k8s.io images import <tarPath>`.
func (c *Containerd) ImportTar(tarPath string) error {
	ctr, err := lookPath("ctr")
	if err != nil {
		return err
	}
	out, err := exec.Command(ctr, "-a", c.sock, "-n", "k8s.io", "images", "import", tarPath).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w\n%s", tarPath, err, out)
	}
	return nil
}

func (c *Containerd) log() string {
	b, _ := os.ReadFile(c.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (c *Containerd) ping(ctx context.Context) error {
	conn, err := grpc.NewClient(c.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = cri.NewRuntimeServiceClient(conn).Version(cctx, &cri.VersionRequest{})
	return err
}

// Close removes every sandbox and container, stops containerd, kills the shims it left and
// unmounts and removes its directory. Every step runs even when an earlier one failed; the
// errors are joined.
func (c *Containerd) Close() error {
	var errs []error
	select {
	case <-c.exited:
	default:
		if err := c.removeAll(); err != nil {
			errs = append(errs, fmt.Errorf("removing sandboxes and containers: %w", err))
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	errs = append(errs, killShims(c.sock), unmountUnder(c.dir), os.RemoveAll(c.dir))
	return errors.Join(errs...)
}

func (c *Containerd) removeAll() error {
	conn, err := grpc.NewClient(c.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := cri.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var errs []error
	cs, err := rt.ListContainers(ctx, &cri.ListContainersRequest{})
	if err != nil {
		return err
	}
	for _, ctr := range cs.Containers {
		if _, err := rt.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: ctr.Id, Timeout: 2}); err != nil {
			errs = append(errs, err)
		}
		if _, err := rt.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: ctr.Id}); err != nil {
			errs = append(errs, err)
		}
	}
	sbs, err := rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, sb := range sbs.Items {
		if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killShims kills the containerd-shim-runc-v2 processes serving sock: they outlive containerd.
func killShims(sock string) error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "containerd-shim-runc-v2" {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == sock {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
		}
	}
	return nil
}

// unmountUnder lazily unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		if p := unescapeMountPath(f[4]); p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

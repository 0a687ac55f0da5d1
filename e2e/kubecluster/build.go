// Package kubecluster runs a real kube-apiserver backed by a real etcd on 127.0.0.1 for the
// project's tests, optionally with the real kube-scheduler and kube-controller-manager. The
// binaries are built from the nested module test/kubebins (k8s.io/kubernetes and
// go.etcd.io/etcd/server/v3 from the Go module proxy) and cached by a hash of that module's
// files, so only the first build on a machine pays the minutes a cold build costs.
package kubecluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/kdm-project/kdm/devicemanager"
)

// KubernetesVersion is the version of k8s.io/kubernetes that test/kubebins pins, and the
// apiserver reports: the newest kubelet row's release (devicemanager.NewestKubelet). Adding a
// newer minor moves the test cluster with it; test/kubebins/go.mod must pin the same release
// (TestKubebinsPinsKubernetesVersion).
var KubernetesVersion = devicemanager.NewestKubelet().Reference

// CacheDirEnv overrides where built binaries are cached (default: the user cache directory,
// under kdm/kubebins).
const CacheDirEnv = "KDM_KUBEBINS_CACHE"

// Binaries are the paths of a built kube-apiserver, kube-scheduler, kube-controller-manager
// and etcd.
type Binaries struct {
	APIServer         string
	Scheduler         string
	ControllerManager string
	Etcd              string
}

// mainPackages are the commands Build builds, as the nested module names them.
var mainPackages = []string{
	"k8s.io/kubernetes/cmd/kube-apiserver",
	"k8s.io/kubernetes/cmd/kube-scheduler",
	"k8s.io/kubernetes/cmd/kube-controller-manager",
	"./etcd",
}

// Build returns the binaries of the module at moduleDir, building them if the cache has no
// build of the module's current content. Concurrent callers on one machine wait for one build.
// Build output goes to log.
func Build(ctx context.Context, moduleDir string, log io.Writer) (Binaries, error) {
	key, err := contentKey(moduleDir)
	if err != nil {
		return Binaries{}, err
	}
	root := os.Getenv(CacheDirEnv)
	if root == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return Binaries{}, fmt.Errorf("no cache directory: set %s: %w", CacheDirEnv, err)
		}
		root = filepath.Join(base, "kdm", "kubebins")
	}
	dir := filepath.Join(root, key)
	bins := Binaries{
		APIServer:         filepath.Join(dir, "kube-apiserver"),
		Scheduler:         filepath.Join(dir, "kube-scheduler"),
		ControllerManager: filepath.Join(dir, "kube-controller-manager"),
		Etcd:              filepath.Join(dir, "etcd"),
	}
	if bins.present() {
		return bins, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return Binaries{}, err
	}
	lock, err := os.OpenFile(filepath.Join(root, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Binaries{}, err
	}
	defer func() { _ = lock.Close() }()
	err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		fmt.Fprintf(log, "kubecluster: another process is building into %s; waiting for it (lock %s)\n", root, lock.Name())
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
	}
	if err != nil {
		return Binaries{}, fmt.Errorf("locking the kubebins cache: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if bins.present() { // built by someone else while we waited
		return bins, nil
	}
	tmp, err := os.MkdirTemp(root, ".build-")
	if err != nil {
		return Binaries{}, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	ldflags := strings.Join([]string{
		"-X k8s.io/component-base/version.gitVersion=" + KubernetesVersion,
		"-X k8s.io/component-base/version.gitMajor=" + major,
		"-X k8s.io/component-base/version.gitMinor=" + minor,
		"-X k8s.io/component-base/version.gitTreeState=clean",
	}, " ")
	args := append([]string{"build", "-v", "-ldflags", ldflags, "-o", tmp + "/"}, mainPackages...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleDir
	fmt.Fprintf(log, "kubecluster: building kube-apiserver, kube-scheduler and kube-controller-manager %s (k8s.io/kubernetes/cmd/...) and etcd (%s) with %s %s/%s into %s\n",
		KubernetesVersion, filepath.Join(moduleDir, "etcd"), runtime.Version(), runtime.GOOS, runtime.GOARCH, dir)
	total := countDeps(ctx, moduleDir, mainPackages)
	fmt.Fprintf(log, "kubecluster: a cold build downloads the modules and compiles up to %d packages: minutes on an idle machine, "+
		"much longer on a busy one; a progress line follows every %s\n", total, HeartbeatEvery)
	progress := startProgress(log, HeartbeatEvery)
	progress.setTotal(total)
	cmd.Stdout, cmd.Stderr = progress, progress
	err = cmd.Run()
	packages := progress.stop()
	if err != nil {
		return Binaries{}, fmt.Errorf("building the Kubernetes binaries and etcd in %s: %w", moduleDir, err)
	}
	fmt.Fprintf(log, "kubecluster: built %d packages in %s\n", packages, time.Since(progress.start).Round(time.Second))
	if err := os.RemoveAll(dir); err != nil {
		return Binaries{}, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return Binaries{}, err
	}
	if !bins.present() {
		return Binaries{}, errors.New("kubecluster: build produced no binaries")
	}
	return bins, nil
}

// countDeps is how many packages the main packages depend on, themselves included: what a
// cold build compiles at most. 0 when go list fails (the build then says why).
func countDeps(ctx context.Context, moduleDir string, mainPackages []string) int {
	cmd := exec.CommandContext(ctx, "go", append([]string{"list", "-deps"}, mainPackages...)...)
	cmd.Dir = moduleDir
	out, err := cmd.Output()
	if err != nil {
		return 0
	}
	return strings.Count(string(out), "\n")
}

func (b Binaries) present() bool {
	for _, p := range []string{b.APIServer, b.Scheduler, b.ControllerManager, b.Etcd} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// contentKey hashes every file of the module (paths and contents), the Go version and the
// platform: any change to what is built, or how, gives a new key.
func contentKey(moduleDir string) (string, error) {
	var files []string
	err := filepath.WalkDir(moduleDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", moduleDir, err)
	}
	sort.Strings(files)
	h := sha256.New()
	fmt.Fprintf(h, "%s %s/%s %s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, KubernetesVersion)
	for _, f := range files {
		rel, _ := filepath.Rel(moduleDir, f)
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", rel, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

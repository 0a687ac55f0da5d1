package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent"
	"github.com/kdm-project/kdm/devicemanager"
)

// kubeClient builds a client from the kubeconfig file and resolves the node name, which
// defaults to the hostname as the kubelet's does.
func kubeClient(kubeconfig, nodeName string) (kubernetes.Interface, string, error) {
	restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, "", fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	restCfg.UserAgent = "kdm"
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, "", err
	}
	if nodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, "", fmt.Errorf("no --node-name and no hostname: %w", err)
		}
		nodeName = strings.ToLower(host)
	}
	return client, nodeName, nil
}

func runDaemon(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("kdm run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rootDir := fs.String("root-dir", agent.DefaultRootDir, "directory for pod-resources/, pods/ and plugins_registry/")
	pluginDir := fs.String("device-plugin-dir", pluginapi.DevicePluginPath, "directory of kubelet.sock, plugin sockets and the checkpoint")
	manifests := fs.String("pod-manifest-path", "", "directory of pod manifests to admit (YAML or JSON)")
	healthz := fs.String("healthz-bind-address", agent.DefaultHealthzBindAddress, "address for /healthz, /metrics and /status (empty disables)")
	grace := fs.Duration("grace-period", devicemanager.DefaultGracePeriod, "how long a resource outlives its stopped plugin")
	policy := fs.String("policy", "kubelet-1.36", "behaviour: kubelet-1.36 (identical to the kubelet) or kdm (deferred admission and the other improvements)")
	watcher := fs.Bool("plugin-watcher", false, "also accept plugins through <root-dir>/plugins_registry")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server to join: pods bound to --node-name are admitted and the Node's device resources published (empty: no API server)")
	nodeName := fs.String("node-name", "", "the Node this agent stands for (default: the hostname)")
	maxPods := fs.Int64("max-pods", 110, "with --kubeconfig: the Node's pods capacity, so that a scheduler may place pods on it")
	shutdownTimeout := fs.Duration("shutdown-timeout", defaultShutdownTimeout, "after SIGTERM or SIGINT, how long to wait for a clean stop before exiting with status 1 (0: wait as long as it takes); a second signal exits at once")
	deferTimeout := fs.Duration("defer-admission-timeout", 0, "with --policy kdm: how long an admission waits for a device plugin that has not registered (yet), and how long after start a resource no plugin has registered is waited for (0: 2m)")
	allocTimeout := fs.Duration("allocate-timeout", 0, "deadline for Allocate and GetPreferredAllocation RPCs (0: none under kubelet-1.36, 30s/10s under kdm)")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "log verbosity")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *shutdownTimeout < 0 {
		fmt.Fprintf(stderr, "kdm run: --shutdown-timeout must not be negative, got %v\n", *shutdownTimeout)
		return 2
	}
	pol, err := devicemanager.ParsePolicy(*policy)
	if err != nil {
		fmt.Fprintf(stderr, "kdm run: --policy: %v\n", err)
		return 2
	}
	if *deferTimeout < 0 {
		fmt.Fprintf(stderr, "kdm run: --defer-admission-timeout must not be negative: %v\n", *deferTimeout)
		return 2
	}
	if *deferTimeout > 0 && pol.DeferAdmission {
		pol.DeferAdmissionTimeout = *deferTimeout
	}
	if *allocTimeout < 0 {
		fmt.Fprintf(stderr, "kdm run: --allocate-timeout must not be negative: %v\n", *allocTimeout)
		return 2
	}
	if *allocTimeout > 0 {
		// Otherwise the policy's own deadlines apply: none for kubelet-1.36, 30s/10s for kdm.
		pol.AllocateTimeout, pol.PreferredAllocationTimeout = *allocTimeout, *allocTimeout
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := agent.Config{
		RootDir:            *rootDir,
		DevicePluginDir:    *pluginDir,
		PodManifestPath:    *manifests,
		HealthzBindAddress: *healthz,
		PluginWatcher:      *watcher,
		GracePeriod:        *grace,
		Policy:             pol,
		Logger:             klog.Background(),
		Registry:           reg,
	}
	if *kubeconfig != "" {
		client, name, err := kubeClient(*kubeconfig, *nodeName)
		if err != nil {
			fmt.Fprintf(stderr, "kdm run: %v\n", err)
			return 1
		}
		cfg.KubeClient, cfg.NodeName = client, name
		cfg.NodeCapacity = v1.ResourceList{v1.ResourcePods: *resource.NewQuantity(*maxPods, resource.DecimalSI)}
	}
	a, err := agent.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kdm run: %v\n", err)
		return 1
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	return runUntilSignalled(a.Run, sigs, *shutdownTimeout, stderr)
}

// defaultShutdownTimeout is --shutdown-timeout's default: long enough for the podresources
// and HTTP servers' bounded graceful stops (5 s each) and a checkpoint write.
const defaultShutdownTimeout = 20 * time.Second

// runUntilSignalled runs run until it returns or a signal arrives on sigs, then cancels its
// context and waits for it for at most timeout (0: without a bound). It returns the process
// exit code: 0 after a clean stop, 1 when run failed, did not stop in time, or a second signal
// asked to exit at once. When the timeout expires, the stacks of the goroutines still running
// go to stderr, so the operator sees what held the stop. It never calls os.Exit.
func runUntilSignalled(run func(context.Context) error, sigs <-chan os.Signal, timeout time.Duration, stderr io.Writer) int {
	log := klog.Background()
	defer klog.Flush()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	exit := func(err error) int {
		if err != nil {
			fmt.Fprintf(stderr, "kdm run: %v\n", err)
			return 1
		}
		log.Info("kdm exited cleanly", "uptime", time.Since(start).Round(time.Millisecond))
		return 0
	}
	select {
	case err := <-done:
		return exit(err)
	case sig := <-sigs:
		log.Info("Stopping", "signal", sig.String(), "shutdownTimeout", timeout)
		cancel()
	}
	var expired <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case err := <-done:
		return exit(err)
	case sig := <-sigs:
		log.Error(nil, "Second signal received, exiting without waiting for the stop to finish", "signal", sig.String())
		return 1
	case <-expired:
		log.Error(nil, "kdm did not stop within the shutdown timeout, exiting; the goroutines still running follow", "shutdownTimeout", timeout)
		klog.Flush()
		_ = pprof.Lookup("goroutine").WriteTo(stderr, 1)
		return 1
	}
}

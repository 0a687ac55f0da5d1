package main

import (
	"context"
	"errors"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"

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

// runAbout is the description in `kdm run --help`.
const runAbout = `Runs the device manager: kubelet.sock for device plugins, the podresources API, the pod
manifest source (--pod-manifest-path) or an API server (--kubeconfig), the checkpoint, and
/healthz, /metrics, /status and the status page. Flags named as the kubelet's mean what they
mean there. It stops on SIGTERM or SIGINT; 'kdm get' asks it what it holds.`

// runDaemon is `kdm run`: it parses the flags, applies the logging configuration, refuses to
// start beside a live device manager, and runs the agent until a signal stops it. It returns
// the exit code: 2 for a bad command line, 1 for a failure, 0 after a clean stop.
func runDaemon(args []string, stdout, stderr io.Writer) int {
	c := newCommand("kdm run", "kdm run [flags]", runAbout, stdout, stderr)
	fs := c.flags
	opts := addRunFlags(fs)
	if code, ok := c.parse(args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return c.misuse("expected no arguments, got %d: %s", fs.NArg(), quoteArgs(fs.Args()))
	}
	if asked, err := opts.version.print(stdout); asked {
		if err != nil {
			return 1
		}
		return 0
	}
	cfg, err := opts.agentConfig(fs)
	if err != nil {
		if ue := (*usageError)(nil); errors.As(err, &ue) {
			return c.misuse("%v", err)
		}
		return c.fail("%v", err)
	}
	if err := logsapi.ValidateAndApply(opts.logging, nil); err != nil {
		return c.misuse("logging flags: %v", err)
	}
	defer klog.Flush()
	if err := cfg.Validate(); err != nil {
		return c.misuse("%v", err)
	}
	if err := checkSocketsFree(servedSockets(cfg)...); err != nil {
		fmt.Fprintf(stderr, "kdm run: refusing to start: %v\n", err)
		return 1
	}
	// The first line kdm logs names the policy, before anything the agent says at start.
	klog.Background().Info("Starting kdm", "policy", opts.policy, "policyIsDefault", !fs.Changed("policy"),
		"defaultPolicy", devicemanager.DefaultPolicyName()+" (the newest supported kubelet)")
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Logger, cfg.Registry = klog.Background(), reg
	if opts.kubeconfig != "" {
		client, name, err := kubeClient(opts.kubeconfig, opts.nodeName)
		if err != nil {
			fmt.Fprintf(stderr, "kdm run: %v\n", err)
			return 1
		}
		cfg.KubeClient, cfg.NodeName = client, name
	}
	a, err := agent.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kdm run: %v\n", err)
		return 1
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	run := func(ctx context.Context) error { return explainRunError(a.Run(ctx), cfg.HealthzBindAddress) }
	return runUntilSignalled(run, sigs, opts.shutdownTimeout, stderr)
}

// explainRunError adds what an operator needs to the agent's errors that usually come from a
// kubelet on the same host: its /healthz listens on the address kdm takes by default.
func explainRunError(err error, healthz string) error {
	if errors.Is(err, syscall.EADDRINUSE) && healthz != "" {
		return fmt.Errorf("%w (is a kubelet serving its healthz on %s? give kdm another --healthz-port, or 0 to serve none)", err, healthz)
	}
	return err
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

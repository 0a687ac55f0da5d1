package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kdm-project/kdm/agent/nodestatus"
	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/podresources"
)

// Agent is a node agent around the device manager: it admits the pods of its pod source
// (init containers first, then app containers), records each pod's devices and run options
// under <root-dir>/kdm/pods, releases the devices of removed pods, serves podresources on the
// kubelet's socket, and /healthz, /livez, /readyz, /metrics and /status over HTTP; with a
// Kubernetes client it also keeps the Node, its Lease and the pods' status current.
//
// Run owns every goroutine; when its context ends the agent stops the manager and returns.
type Agent struct {
	cfg     Config
	log     klog.Logger
	clock   clock.Clock
	host    host // the machine the Node describes (nodeidentity.go)
	manager *devicemanager.Manager
	// publisher keeps the Node current while Run runs with a KubeClient; nil otherwise.
	publisher atomic.Pointer[nodestatus.Publisher]

	mu        sync.Mutex
	pods      map[types.UID]*v1.Pod              // the pod sources' current pods
	podSource map[types.UID]string               // which source added each pod
	results   map[types.UID]*podresult.PodResult // admission outcome per pod
	inflight  map[types.UID]*admission
	// lastAdmission is, per device resource, the latest admission that asks for it: the next
	// one waits for it (queue.go).
	lastAdmission map[string]*admission
	ready         atomic.Bool // every source's first listing has been admitted
	// containers runs admitted pods through a container runtime; nil without one
	// (containers.go).
	containers *containerRoom
	// kube is the API server pod source (agent/apipods.go), nil without a KubeClient. Recorded
	// results requeue its pods so their status is published.
	kube *apiPods

	recordMu sync.Mutex // serialises writing and publishing pod results

	events *eventLog // the status page's timeline (events.go)

	admissions sync.WaitGroup
	// removals releases removed pods' devices and marks stopping pods Terminating (removals.go).
	removals *removals

	// admissionResults is kdm_admissions_total (metrics.go).
	admissionResults *prometheus.CounterVec
}

// New applies cfg's defaults, validates it and builds the agent and its device manager.
func New(cfg Config) (*Agent, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid agent config: %w", err)
	}
	var a *Agent // the manager reports deferred admissions to the agent built below
	m, err := devicemanager.New(devicemanager.Config{
		OnAdmissionDeferred: func(podUID, container, resource string) {
			a.markPending(podUID, container, resource)
		},
		PluginDir:   cfg.DevicePluginDir,
		GracePeriod: cfg.GracePeriod,
		Endpoint:    cfg.Endpoint,
		Logger:      cfg.Logger,
		Registerer:  cfg.Registry,
		Policy:      cfg.Policy,
		PluginWatcherDir: func() string {
			if cfg.PluginWatcher {
				return cfg.RootDir + "/plugins_registry"
			}
			return ""
		}(),
	})
	if err != nil {
		return nil, err
	}
	a = &Agent{
		cfg:           cfg,
		log:           cfg.Logger.WithName("agent"),
		manager:       m,
		pods:          map[types.UID]*v1.Pod{},
		podSource:     map[types.UID]string{},
		results:       map[types.UID]*podresult.PodResult{},
		inflight:      map[types.UID]*admission{},
		lastAdmission: map[string]*admission{},
		removals:      newRemovals(),
		events:        newEventLog(cfg.Clock.Now),
		clock:         cfg.Clock,
		host:          realHost(cfg.Logger),
	}
	if cfg.KubeClient != nil {
		a.kube = newAPIPods(a)
	}
	if cfg.ContainerRuntimeEndpoint != "" {
		if a.containers, err = newContainerRoom(a); err != nil {
			return nil, err
		}
	}
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kdm_admission_pending_pods",
		Help: "Number of pods whose admission waits for a device plugin to register (deferred admission).",
	}, func() float64 { return float64(a.pendingPods()) })
	terminating := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kdm_terminating_pods",
		Help: "Number of pods removed from their source whose containers the container runtime has not yet confirmed gone; they hold their devices until then.",
	}, func() float64 { return float64(a.terminatingPods()) })
	a.admissionResults = newAdmissionCounter()
	for _, c := range []prometheus.Collector{pending, terminating, a.admissionResults} {
		if err := cfg.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("registering agent metrics: %w", err)
		}
	}
	return a, nil
}

// Manager returns the agent's device manager.
func (a *Agent) Manager() *devicemanager.Manager { return a.manager }

// Run starts the manager, the podresources server, the HTTP server and the pod source, and
// blocks until ctx ends; then it stops everything and returns. Containers of pods admitted by a
// previous run are reported to the manager as running, so a restart keeps their devices
// without contacting the plugins.
func (a *Agent) Run(ctx context.Context) error {
	if err := os.MkdirAll(a.cfg.RootDir, 0o750); err != nil {
		return fmt.Errorf("creating root dir: %w", err)
	}
	if err := os.MkdirAll(a.cfg.PodsDir(), 0o750); err != nil {
		return fmt.Errorf("creating pod results dir: %w", err)
	}
	podresult.Migrate(a.log, a.cfg.legacyPodsDir(), a.cfg.PodsDir())
	podresult.RemoveTemps(a.cfg.PodsDir())
	var publisher *nodestatus.Publisher
	if a.kube != nil {
		pcfg, err := a.nodePublisherConfig()
		if err != nil {
			return err
		}
		if a.containers != nil {
			// The kubelet's nodeInfo names its runtime; one that does not answer yet is left out.
			if v, err := a.containers.askVersion(ctx); err == nil {
				pcfg.NodeInfo.ContainerRuntimeVersion = v
			} else {
				a.log.Error(err, "Container runtime does not answer; the Node names none", "endpoint", a.cfg.ContainerRuntimeEndpoint)
			}
		}
		if publisher, err = nodestatus.NewPublisher(pcfg); err != nil {
			return err
		}
	}
	running, recovered, err := a.previouslyRunning()
	if err != nil {
		return err
	}
	a.events.started(len(running))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := a.manager.Start(ctx, devicemanager.Sources{
		ActivePods:           a.activePods,
		SourcesReady:         a.ready.Load,
		RunningContainers:    running,
		RecoveredAllocations: recovered,
	}); err != nil {
		return err
	}
	defer func() { _ = a.manager.Stop() }()

	prs, err := podresources.NewServer(podresources.ServerConfig{
		Providers: podresources.Providers{Pods: podsProvider{a}, Devices: devicesProvider{a.manager}},
		Registry:  a.cfg.Registry,
		Logger:    a.log,
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	spawn := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errc <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	spawn("podresources", func(ctx context.Context) error { return prs.Serve(ctx, a.cfg.PodResourcesSocket()) })
	if a.cfg.HealthzBindAddress != "" {
		spawn("http", a.serveHTTP)
	}
	spawn("pod removals", a.runRemovals)
	spawn("health updates", a.watchHealth)
	spawn("device events", a.watchDevices)
	if a.containers != nil {
		spawn("container runtime", a.containers.run)
	}
	type podSource struct {
		name string
		run  func(ctx context.Context, sourceReady func()) error
	}
	var sources []podSource
	if a.cfg.PodManifestPath != "" {
		sources = append(sources, podSource{"pod manifests", manifestPods{a}.watchManifests})
	}
	if a.kube != nil {
		sources = append(sources, podSource{"pods from the API server", a.kube.run})
		a.publisher.Store(publisher)
		spawn("node status", publisher.Run)
	} else {
		spawn("node status", a.syncNodeStatus)
	}
	sourceReady := a.readyAfter(len(sources))
	for _, src := range sources {
		spawn(src.name, func(ctx context.Context) error { return src.run(ctx, sourceReady) })
	}
	a.log.Info("Agent started", "rootDir", a.cfg.RootDir, "devicePluginDir", a.cfg.DevicePluginDir,
		"podManifestPath", a.cfg.PodManifestPath, "node", a.cfg.NodeName, "podResourcesSocket", a.cfg.PodResourcesSocket())
	<-ctx.Done()
	a.cancelAdmissions()
	wg.Wait()
	a.admissions.Wait()
	a.log.Info("Agent stopped")
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// readyAfter returns the function each of n pod sources calls once its first listing is
// admitted. When the last one has, the sources count as ready: pods removed while the agent was
// down lose their results, and the manager releases devices of pods no source names.
func (a *Agent) readyAfter(n int) func() {
	var remaining atomic.Int32
	remaining.Store(int32(n))
	markReady := func() {
		// Stale pods first: with a container runtime, a pod removed while the agent was down
		// must count as stopping (active, its devices held) before the manager may collect
		// inactive pods, which it does once the sources are ready, at the next Allocate too.
		// Otherwise a pod admitted just then got devices the removed pod's containers run with.
		a.dropStaleResults()
		a.ready.Store(true)
		a.manager.UpdateAllocatedDevices()
		if a.containers != nil {
			a.containers.sourcesReady()
		}
	}
	if n == 0 {
		markReady()
	}
	var once sync.Once
	return func() {
		if remaining.Add(-1) == 0 {
			once.Do(markReady)
		}
	}
}

// previouslyRunning lists the containers of pods admitted by an earlier run (app containers
// and sidecars: regular init containers ran to completion before the apps started), and the
// devices every container of those pods held: the agent's second copy of the assignments,
// which the manager restores if the checkpoint was lost.
func (a *Agent) previouslyRunning() ([]devicemanager.ContainerKey, []checkpoint.PodDevicesEntry, error) {
	// Only admitted and rejected pods' results are kept: the files are read one at a time
	// (Scan), so the others are never held together.
	results := map[types.UID]*podresult.PodResult{}
	skipped, err := podresult.Scan(a.cfg.PodsDir(), func(r *podresult.PodResult) {
		if r.Phase == podresult.PhaseAdmitted || r.Phase == podresult.PhaseRejected {
			results[r.UID] = r
		}
	})
	for _, err := range skipped {
		// Such a pod is not known as running: if the checkpoint holds its devices they
		// stay assigned, but they cannot be restored from this copy.
		a.log.Error(err, "Skipped a pod result that cannot be used")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading previous pod results: %w", err)
	}
	var keys []devicemanager.ContainerKey
	var held []checkpoint.PodDevicesEntry
	a.mu.Lock()
	defer a.mu.Unlock()
	for uid, r := range results {
		if r.Phase == podresult.PhaseRejected {
			a.results[uid] = r // a rejection is terminal across restarts (Agent.keepRejected)
			continue
		}
		if r.Phase != podresult.PhaseAdmitted {
			continue
		}
		a.results[uid] = r
		for _, c := range r.Containers {
			if !c.Init || c.Sidecar {
				keys = append(keys, devicemanager.ContainerKey{PodUID: string(uid), ContainerName: c.Name})
			}
			for _, al := range c.Allocations {
				held = append(held, checkpoint.PodDevicesEntry{PodUID: string(uid), ContainerName: c.Name,
					ResourceName: al.Resource, DeviceIDs: al.DeviceIDs, AllocResp: al.AllocResp})
			}
		}
	}
	return keys, held, nil
}

// activePods lists the pods of the source that were not rejected and whose containers have
// not all ended for good (the kubelet's active pods), and, with a container runtime, the removed
// pods whose containers may still run.
func (a *Agent) activePods() []*v1.Pod {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*v1.Pod, 0, len(a.pods))
	for uid, p := range a.pods {
		if r := a.results[uid]; r != nil && (r.Phase == podresult.PhaseRejected || r.Runtime.Terminal()) {
			continue
		}
		out = append(out, p)
	}
	if a.containers != nil {
		// Removed pods whose containers may still run keep their devices.
		out = append(out, a.containers.stoppingPods()...)
	}
	return out
}

// syncNodeStatus calls GetCapacity every 10 seconds, as the kubelet's node status loop does,
// so resources whose plugin is gone past the grace period are removed.
func (a *Agent) syncNodeStatus(ctx context.Context) error {
	for {
		t := a.clock.NewTimer(10 * time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
			if _, _, removed := a.manager.GetCapacity(); len(removed) > 0 {
				a.log.Info("Device plugin resources removed from the node", "resourceNames", removed)
			}
		}
	}
}

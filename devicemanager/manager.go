package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/endpoint"
	"github.com/kdm-project/kdm/internal/checkpoint"
	"github.com/kdm-project/kdm/internal/state"
)

// ContainerKey names one container of one pod.
type ContainerKey = state.ContainerKey

// Sources are what the manager learns from its embedder at Start.
type Sources struct {
	// ActivePods lists the pods that are neither terminated nor being removed; the pod being
	// admitted must be among them. Nil means no pods. The listed objects are treated as
	// immutable, as the kubelet's are: the manager remembers each object's UID from one
	// call to the next, so an object must not be given another UID once listed.
	ActivePods func() []*v1.Pod
	// SourcesReady reports whether every pod source has delivered its pods at least once.
	// Until then no allocation is garbage-collected. Nil means always ready. Like ActivePods,
	// it is called without the manager's lock held and may call back into the manager.
	SourcesReady func() bool
	// RunningContainers are the containers the runtime reported running when the embedder
	// started. Their checkpointed devices are kept without contacting the plugin while
	// sources are not all ready (the kubelet-restart bypass).
	RunningContainers []ContainerKey
	// RecoveredAllocations is the embedder's own durable record of the assignments (the
	// entries GetContainerAllocations returned for its admitted containers). When the
	// checkpoint is missing or unusable, the manager restores these assignments instead of
	// starting empty, and writes them back as a checkpoint. A checkpoint that decodes is
	// compared with them (RecordDisagreements); under Policy.KeepRecordedDevices each
	// recorded device stays with its pod.
	RecoveredAllocations []checkpoint.PodDevicesEntry
}

// endpointInfo is the current instance serving a resource: the endpoint and the options it
// reported at connect time (nil for a stopped placeholder restored from the checkpoint).
type endpointInfo struct {
	ep   *endpoint.Endpoint
	opts *pluginapi.DevicePluginOptions
}

// Manager is the device manager: it owns the registration socket, one endpoint per
// registered resource, the device sets, the per-container assignments and the checkpoint.
// The package documentation groups its methods by the caller that needs them.
//
// All exported methods are safe for concurrent use. One mutex (mu) guards every piece of
// device and assignment state; no RPC and no disk write is made while it is held. Checkpoint
// writes are serialised by writeMu and always write a snapshot taken after the change that
// triggered them.
//
// Lock order: a goroutine that holds one of the manager's mutexes takes only those after it
// in this list, never one before it:
//
//  1. life: the lifecycle fields (started, stopped, runCtx); held by connect across the swap
//     of an endpoint, so that Stop cannot miss it;
//  2. writeMu: checkpoint writes; held across the snapshot and the write;
//  3. views.mu: the view cache of Resources (viewcache.go); held while views are built;
//  4. mu: the device and assignment state; held only for in-memory work.
type Manager struct {
	cfg        Config
	log        klog.Logger
	socketPath string
	store      *checkpoint.Store
	metrics    *metrics
	updates    chan Update

	mu sync.Mutex
	// st is the device and assignment state: device sets, assignments, reservations, reuse
	// pools, running containers, plugin presence. The manager feeds it and acts on its
	// decisions; it is guarded by mu.
	st            *state.State
	rules         state.Rules // the policy's switches the core's decisions read; set by New
	endpoints     map[string]endpointInfo
	recovered     map[string]sets.Set[string] // devices restored from RecoveredAllocations, until the plugin's first list
	startedAt     time.Time                   // when Start ran: opens the unknown-resource window of DeferAdmission
	sources       Sources
	deviceChange  chan struct{}         // closed and replaced whenever endpoints or device sets change
	deviceChanges uint64                // counts the changes, each as it is made (waitorder.go)
	sleepers      map[*sleeper]struct{} // admissions that waited for a plugin, until their allocation ends (waitorder.go)
	lastTicket    uint64                // the order in which sleepers first waited
	turnChange    chan struct{}         // closed and replaced when a sleeper sleeps again or leaves
	rejected      map[string]struct{}   // pods whose Allocate failed, gone for garbage collection (noteOutcome)
	// restoring is set while a goroutine started by Start restores the checkpoint, holding mu
	// (restoreConcurrently).
	restoring atomic.Bool
	// active are the pods the source listed at the last garbage collection (activePods).
	// Guarded by mu.
	active activePods
	// disagreements are what the restore found between the checkpoint and the embedder's
	// records (records.go); set by Start, never changed after. Guarded by mu.
	disagreements []RecordDisagreement

	// replaced holds, per resource, the replaced instances whose streams stay open, oldest
	// first (see connect). Guarded by mu.
	replaced map[string][]*endpoint.Endpoint
	// replacedLists holds the last device list each kept replaced instance sent while
	// replaced, for its promotion under Policy.PromoteLiveInstance. Guarded by mu.
	replacedLists map[*endpoint.Endpoint][]*pluginapi.Device

	// views keeps the device views Resources built, between calls (viewcache.go). Its
	// mutex is taken before mu.
	views viewCache

	writeMu       sync.Mutex    // serialises checkpoint writes
	writeRequests chan struct{} // capacity 1: a coalesced device-list write is wanted
	// synced is what a restart would read back from the last write whose directory was
	// synced; guarded by writeMu (see restartView).
	synced restartView

	serveErr error // the registration server's Serve error, under mu

	life     sync.Mutex // guards the lifecycle fields below
	started  bool
	stopped  bool
	stopDone chan struct{}   // closed when Stop has finished
	runCtx   context.Context // ends at Stop; owns every background goroutine
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	server   *grpc.Server

	// testHookRestoring, when set by a test, runs on the goroutine that restores the
	// checkpoint, holding mu, before it restores anything.
	testHookRestoring func()
	// testHookAfterDial, when set by a test, runs in connect between the plugin's dial and
	// the swap of the resource's endpoint.
	testHookAfterDial func()
	// testHookAfterWatcherConnect, when set by a test, runs in the plugins_registry watcher
	// right after a registration through it connected.
	testHookAfterWatcherConnect func()
}

// ManagerImpl is the kubelet's name for the device manager type.
//
// Deprecated: use Manager.
type ManagerImpl = Manager

// New builds a manager from cfg. It touches nothing on disk until Start.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	met, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("registering device manager metrics: %w", err)
	}
	m := &Manager{
		cfg:        cfg,
		log:        cfg.Logger.WithName("devicemanager"),
		socketPath: filepath.Join(cfg.PluginDir, KubeletSocketName),
		metrics:    met,
		updates:    make(chan Update, updateChannelSize),
		st: state.New(state.Options{KeepCompletedInitDevices: cfg.Policy.KeepCompletedInitDevices,
			KnowAssignedResources: cfg.Policy.DeferAdmission}),
		rules:         cfg.Policy.Rules(cfg.GracePeriod),
		endpoints:     map[string]endpointInfo{},
		deviceChange:  make(chan struct{}),
		turnChange:    make(chan struct{}),
		writeRequests: make(chan struct{}, 1),
	}
	if err := registerResourceCollector(cfg.Registerer, m); err != nil {
		return nil, fmt.Errorf("registering device manager metrics: %w", err)
	}
	return m, nil
}

// Policy returns the manager's policy (defaults applied).
func (m *Manager) Policy() Policy { return m.cfg.Policy }

// SocketPath is the registration socket, <PluginDir>/kubelet.sock.
func (m *Manager) SocketPath() string { return m.socketPath }

// CheckpointPath is the checkpoint file, <PluginDir>/kubelet_internal_checkpoint.
func (m *Manager) CheckpointPath() string {
	return filepath.Join(m.cfg.PluginDir, checkpoint.FileName)
}

// Start creates the plugin directory (0750), restores the checkpoint, removes stale plugin
// sockets, and serves Registration on a fresh kubelet.sock. Plugins detect the restart by
// their socket's removal and kubelet.sock's creation, and register again.
//
// The checkpoint is read before Start cleans the directory; its assignments are restored on a
// goroutine meanwhile, which may still run when Start returns. That goroutine holds the
// manager's lock until it is done, so every method called afterwards, a plugin's Register
// included, sees the restored state and never the state before it.
//
// A missing checkpoint is a clean start, and a corrupt one is logged (and quarantined unless
// configured otherwise); in both cases the manager continues with the embedder's recovered
// allocations, if any, else with empty state as the kubelet does. A checkpoint that exists but
// cannot be read (permissions, I/O) fails Start with an *UnreadableCheckpointError, unless
// Config.ContinueOnUnreadableCheckpoint. Start also fails if the directory, the cleanup or the
// listener fails. It may be called once;
// ctx bounds the manager's background work together with Stop.
func (m *Manager) Start(ctx context.Context, src Sources) error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.started {
		return errors.New("device manager already started")
	}
	if err := os.MkdirAll(m.cfg.PluginDir, 0o750); err != nil {
		return fmt.Errorf("creating device plugin directory: %w", err)
	}
	store, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: m.cfg.PluginDir,
		Logger: m.log, OverwriteCorrupt: !*m.cfg.QuarantineCorruptCheckpoint,
		PlainWrites: m.cfg.PlainCheckpointWrites})
	if err != nil {
		return fmt.Errorf("opening checkpoint store: %w", err)
	}
	m.store = store

	m.mu.Lock()
	m.sources = src
	m.startedAt = m.cfg.Clock.Now()
	m.st.SetRunning(src.RunningContainers)
	m.mu.Unlock()

	apply, err := m.readCheckpoint()
	if err != nil {
		return err
	}
	restored := m.restoreConcurrently(apply)
	if err := RemovePluginSockets(m.cfg.PluginDir); err != nil {
		<-restored
		return fmt.Errorf("cleaning up device plugin directory: %w", err)
	}
	_ = os.Remove(m.socketPath)
	lis, err := net.Listen("unix", m.socketPath)
	if err != nil {
		<-restored
		return fmt.Errorf("listening on %s: %w", m.socketPath, err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	m.runCtx, m.cancel = runCtx, cancel
	m.server = grpc.NewServer(grpc.Creds(newRegistrantCredentials())) // names each call's registrant (register_peer.go)
	pluginapi.RegisterRegistrationServer(m.server, newRegistrationServer(m))
	m.started = true
	m.stopDone = make(chan struct{})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		// ErrServerStopped: Stop came before Serve began, a clean stop like any other.
		if err := m.server.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			m.log.Error(err, "Device plugin registration server stopped serving")
			m.mu.Lock()
			m.serveErr = err
			m.mu.Unlock()
		}
	}()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.runCheckpointWriter(runCtx)
	}()
	if m.cfg.PluginWatcherDir != "" {
		if err := m.startPluginWatcher(runCtx); err != nil {
			finish := m.beginStopLocked()
			m.life.Unlock() // a registration in flight takes life to learn the manager stopped
			finish()
			m.life.Lock()
			return err
		}
	}
	m.log.V(2).Info("Device manager started", "socket", m.socketPath)
	return nil
}

// restoreConcurrently restores a checkpoint that was read (apply, from readCheckpoint; nil
// restores nothing) on a goroutine, while Start cleans the directory and serves kubelet.sock.
// It takes mu itself and hands it, held, to that goroutine, which unlocks it once the state
// is restored: whoever takes mu next (a plugin's Register, an admission, Stop) sees the
// restored state, and GetCapacity, which otherwise reads capacity without mu, takes mu until
// then. Start goes on at once rather than waiting for the goroutine to be scheduled (on a
// busy node the new goroutine would otherwise run its whole restore before Start resumes).
// The returned channel closes when the goroutine is done.
func (m *Manager) restoreConcurrently(applyLocked func()) <-chan struct{} {
	done := make(chan struct{})
	if applyLocked == nil {
		close(done)
		return done
	}
	m.mu.Lock() // unlocked by the goroutine below (a sync.Mutex may be)
	m.restoring.Store(true)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(done)
		defer m.mu.Unlock()
		if m.testHookRestoring != nil {
			m.testHookRestoring()
		}
		applyLocked()
		m.restoring.Store(false)
	}()
	return done
}

// Stop disconnects every plugin (its devices become unhealthy and its endpoint stopped),
// stops the registration server (removing kubelet.sock) and waits for every goroutine.
// It writes no checkpoint. It is safe to call twice, or before Start.
//
// Stop does not hold the lifecycle lock while it waits: a registration in flight (through
// kubelet.sock or the plugins_registry watcher, whose goroutine Stop joins) takes that lock
// to learn that the manager stopped, and gives up. A second concurrent Stop waits for the
// first to finish.
func (m *Manager) Stop() error {
	m.life.Lock()
	finish := m.beginStopLocked()
	m.life.Unlock()
	finish()
	return nil
}

// beginStopLocked marks the manager stopped and cancels its context. The returned function
// does the rest and must be called without life held. Callers hold life.
func (m *Manager) beginStopLocked() func() {
	if !m.started {
		return func() {}
	}
	done := m.stopDone
	if m.stopped {
		return func() { <-done }
	}
	m.stopped = true
	m.cancel()
	return func() {
		m.finishStop()
		close(done)
	}
}

// finishStop disconnects the plugins, stops the registration server and joins every
// goroutine.
func (m *Manager) finishStop() {
	m.mu.Lock()
	var eps []*endpoint.Endpoint
	for _, info := range m.endpoints {
		eps = append(eps, info.ep)
	}
	m.mu.Unlock()
	for _, ep := range eps {
		ep.Stop()
	}
	m.mu.Lock()
	now := m.cfg.Clock.Now()
	for res := range m.endpoints {
		m.markResourceUnhealthyLocked(res, now)
	}
	m.mu.Unlock()
	m.server.Stop()
	m.wg.Wait()
	_ = m.store.Close() // waits for its goroutines: replaced files' release, a directory sync
	m.mu.Lock()
	m.serveErr = nil
	m.mu.Unlock()
	m.log.V(2).Info("Device manager stopped")
}

// HealthCheck reports an error when the registration server has failed, so that no plugin
// can register. It is the kubelet's "device-plugin" healthz check.
func (m *Manager) HealthCheck() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.serveErr != nil {
		return fmt.Errorf("device registration error: device plugin registration gRPC server failed and no device plugins can register: %w", m.serveErr)
	}
	return nil
}

// HealthCheckName is the name of the check HealthCheck implements.
const HealthCheckName = "device-plugin"

// signalDeviceChangeLocked wakes everyone waiting for a device or endpoint change. Callers
// hold mu.
func (m *Manager) signalDeviceChangeLocked() {
	m.deviceChanges++
	close(m.deviceChange)
	m.deviceChange = make(chan struct{})
}

// RemovePluginSockets removes every socket directly in dir, as Start does (and the kubelet at
// its start): plugins see their socket vanish and register again once kubelet.sock is back.
// Regular files (the checkpoint), directories and anything that cannot be stat'ed stay.
func RemovePluginSockets(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		fi, err := os.Stat(path)
		if err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

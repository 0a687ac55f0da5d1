package devicemanager

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/kdm-project/kdm/endpoint"
)

// DefaultGracePeriod is how long a resource whose plugin went away keeps its capacity
// before it is removed (the kubelet's endpointStopGracePeriod).
const DefaultGracePeriod = 5 * time.Minute

// DefaultDeferAdmissionTimeout is how long an admission waits for a checkpointed plugin to
// re-register when Policy.DeferAdmission is on and Policy.DeferAdmissionTimeout is zero.
const DefaultDeferAdmissionTimeout = 2 * time.Minute

// KubeletSocketName is the name of the registration socket inside the plugin directory.
const KubeletSocketName = "kubelet.sock"

// Config describes a Manager. Every field's zero value means the default documented on it,
// and the zero Config behaves like the kubelet v1.36 device manager on
// /var/lib/kubelet/device-plugins. Values that are set are used as given: New rejects invalid
// ones with Validate's error instead of correcting them.
type Config struct {
	// PluginDir holds kubelet.sock, the plugins' sockets and the checkpoint.
	// Default: pluginapi.DevicePluginPath. Must be absolute.
	PluginDir string

	// PluginWatcherDir, when set, enables the plugins_registry registration path: every socket
	// created there is asked for its pluginregistration v1 GetInfo and, for a DevicePlugin,
	// connected like a Register call. Typically <root-dir>/plugins_registry.
	PluginWatcherDir string

	// GracePeriod is how long a stopped endpoint keeps its resource. Zero means
	// DefaultGracePeriod; negative is invalid.
	GracePeriod time.Duration

	// Endpoint carries the dial, options and PreStartContainer deadlines and the message size
	// used for every plugin; its zero fields mean what endpoint.Config documents. Its
	// AllocateTimeout and PreferredAllocationTimeout must be zero: those deadlines are
	// Policy's, set there in one place. Its Clock must be nil: endpoints run on Clock, so that
	// stop times and grace periods are measured by one clock. Its zero Logger means Logger.
	Endpoint endpoint.Config

	// Clock drives grace periods and stop times. Default: the real clock.
	Clock clock.Clock

	// Logger is the base logger. Default: klog.Background().
	Logger klog.Logger

	// Registerer receives the manager's metrics. Nil: metrics are kept but not registered.
	Registerer prometheus.Registerer

	// QuarantineCorruptCheckpoint renames an unreadable checkpoint aside
	// (kubelet_internal_checkpoint.corrupt-<time>) instead of letting the next write replace it.
	// The kubelet never does this; kdm's default (nil means true) is to keep the evidence.
	QuarantineCorruptCheckpoint *bool

	// PlainCheckpointWrites makes every checkpoint write a new temporary file, fsynced and
	// renamed over the checkpoint, as on systems other than Linux (checkpoint.StoreConfig's
	// PlainWrites). Off by default: Linux writes reuse the file the write before replaced and
	// exchange names with it, which costs the disk less. The files are the same either way.
	PlainCheckpointWrites bool

	// ContinueOnUnreadableCheckpoint makes Start go on with empty state when the checkpoint
	// exists but cannot be read (permissions, I/O), as the kubelet does; its next write then
	// replaces the file. Off by default: Start fails and the file stays as it was.
	ContinueOnUnreadableCheckpoint bool

	// TopologyAffinity supplies each container's NUMA affinity hint (the topology manager's
	// store). Nil means no hint: every device counts as "no affinity".
	TopologyAffinity AffinityStore

	// NUMANodes are the machine's NUMA node IDs, used to bound topology hints. A node a device
	// reports that is not listed here is ignored, as the kubelet ignores nodes unknown to
	// cadvisor; with none listed, a resource whose devices have topology gets an empty hint list.
	NUMANodes []int

	// Policy selects the kubelet minor kdm replays and kdm's improvements over it. The zero
	// value is the baseline kubelet's behaviour (BaselinePolicyName); KubeletPolicy is the
	// newest kubelet's.
	Policy Policy

	// OnAdmissionDeferred, if set, is called when an admission starts waiting for a resource's
	// plugin (Policy.DeferAdmission), so an agent can report the pod as pending. It runs in
	// the admitting goroutine with none of the manager's locks held: it may call back into
	// the manager, and while it runs only that admission waits.
	OnAdmissionDeferred func(podUID, containerName, resource string)
}

// Policy switches on behaviour that differs from the kubelet v1.36, the baseline. Each field
// is off in the zero value, which replays the kubelet v1.36 exactly, and stays so whatever
// minors are added, older or newer, so that an embedder's zero Config keeps its meaning.
// Some fields are what a newer kubelet changed (v1.37: RejectSameSocketRegistration,
// PromoteLiveInstance, SkipAllocationOnResize), some what an older one did differently
// (v1.35: HintsOverEveryNUMANode, NoDeviceHealthInPodStatus); KubeletVersions lists which
// minor turns on which. The others are kdm's improvements, which no kubelet has.
type Policy struct {
	// RejectSameSocketRegistration refuses a Register for a resource and socket that a
	// connected instance of the resource already serves, current or replaced, as the kubelet
	// v1.37 does: "device plugin already connected: <plugin dir joined with endpoint>", a
	// plain error (gRPC Unknown). The check runs after the dial and GetDevicePluginOptions,
	// so their errors win, and the new connection is closed. The connected instance stays
	// as it was; unlike the kubelet v1.37, kdm does not also forget it (docs/defects.md). Off,
	// the Register replaces the instance, as the kubelet v1.36 does.
	RejectSameSocketRegistration bool

	// PromoteLiveInstance keeps a resource served while any instance of its plugin is
	// connected, as the kubelet v1.37 does: when the current instance's stream ends and a
	// replaced instance is still connected, the most recently registered of them becomes
	// current (Allocate, GetPreferredAllocation and PreStartContainer go to it; the kubelet
	// picks one in map order), the devices stay healthy and no grace period starts; only the
	// last instance's end marks them unhealthy. A plugins_registry socket's removal stops the
	// instance registered through it, current or replaced. Off, the current instance's end
	// marks the devices unhealthy whatever else is connected, and a watched socket's removal
	// stops its instance only while it is current, as the kubelet v1.36 does.
	PromoteLiveInstance bool

	// SkipAllocationOnResize makes AllocateFor return at once for any lifecycle operation
	// other than add (an in-place resize), as the kubelet v1.37 does: device health never
	// blocks a resize. Off, a resize runs the allocation again, health checks included, as
	// the kubelet v1.36 does.
	SkipAllocationOnResize bool

	// HintsOverEveryNUMANode enumerates topology hints over every NUMA node of the machine
	// (Config.NUMANodes), device-less nodes included, as the kubelet v1.35 does: with devices
	// on node 0 of nodes 0 and 1, a request of one device gets {0} (preferred) and {0,1}.
	// Off, only the nodes the resource's devices are on are enumerated, as the kubelet v1.36
	// does (here {0} alone).
	HintsOverEveryNUMANode bool

	// NoDeviceHealthInPodStatus leaves device health out of pod status, as the kubelet v1.35
	// does by default (feature gate ResourceHealthStatus alpha, off): a device list that
	// changes a held device's health, or a plugin's disconnect, sends no Update, and
	// UpdateAllocatedResourcesStatus changes nothing. Off, both report health (KEP-4680), as
	// the kubelet v1.36 does with the gate on by default.
	NoDeviceHealthInPodStatus bool

	// DeferAdmission makes Allocate wait, up to DeferAdmissionTimeout, for a plugin that is
	// known from the checkpoint but has not re-registered yet, instead of failing with
	// "no healthy devices present". A zero DeferAdmissionTimeout means DefaultDeferAdmissionTimeout
	// (two minutes); negative is invalid.
	DeferAdmission        bool
	DeferAdmissionTimeout time.Duration

	// KeepCompletedInitDevices treats a container that holds a checkpointed allocation, in a pod
	// that has a running container, as already running after a restart, so completed init
	// containers keep their devices without contacting the plugin.
	KeepCompletedInitDevices bool

	// PreferredAllocationFallback makes a failing GetPreferredAllocation fall back to the
	// manager's own choice instead of failing admission.
	PreferredAllocationFallback bool

	// CoalesceDeviceListWrites moves the checkpoint write that follows a ListAndWatch update
	// (or a resource removal) off the plugin's stream to a background writer that folds bursts
	// into one durable write. Nothing a restart reads is lost: only the keys of
	// RegisteredDevices are used on restore, and assignments are always written before
	// Allocate returns. The kubelet writes synchronously on every message.
	CoalesceDeviceListWrites bool

	// DropRemovedResources tells node-status publishers to remove a resource whose plugin has
	// been gone past the grace period from the node's capacity, instead of publishing it at 0
	// for ever as the kubelet does (kubernetes #99571, #53395). The manager itself behaves the
	// same either way; publishers read it with Manager.Policy.
	DropRemovedResources bool

	// ReadLegacyCheckpoint restores a pre-1.20 (V1) checkpoint, with every device on NUMA node
	// 0, as kubelets 1.20 to 1.29 did. The kubelet 1.36 cannot read that layout and starts with
	// empty state.
	ReadLegacyCheckpoint bool

	// KeepRecordedDevices compares a checkpoint that decodes, at Start, with the embedder's
	// records (Sources.RecoveredAllocations) and keeps every recorded device with its pod: a
	// record's entry replaces the checkpoint's for the same container and resource, or is
	// added where the checkpoint has none, so a device that the checkpoint gives to another
	// pod is contested (Contest) and goes to no third pod. The result is written back as the
	// checkpoint. Off, the checkpoint is followed as the kubelet does, even when it is stale
	// (docs/defects.md). Either way the disagreements are logged, counted and returned by
	// RecordDisagreements.
	KeepRecordedDevices bool

	// AllocateTimeout and PreferredAllocationTimeout bound each Allocate and
	// GetPreferredAllocation RPC to a plugin. Zero means no deadline beyond the caller's
	// context, as in the kubelet (kubernetes #117435, #129249); negative is invalid. This is
	// the one place these deadlines are set: to run KDMPolicy without one, zero its field.
	AllocateTimeout            time.Duration
	PreferredAllocationTimeout time.Duration
}

// KDMPolicy turns on every improvement, with a two-minute admission deferral and the plugin
// RPC deadlines endpoint.RecommendedAllocateTimeout (30s) and
// endpoint.RecommendedPreferredAllocationTimeout (10s): what `kdm run --policy kdm` runs.
// Of the kubelet v1.37's changes it takes PromoteLiveInstance, and not
// RejectSameSocketRegistration: a plugin that registers twice on one socket (ROCm's does)
// is accepted, as by the kubelet v1.36.
func KDMPolicy() Policy {
	return Policy{
		PromoteLiveInstance:         true,
		SkipAllocationOnResize:      true,
		DeferAdmission:              true,
		DeferAdmissionTimeout:       DefaultDeferAdmissionTimeout,
		KeepCompletedInitDevices:    true,
		PreferredAllocationFallback: true,
		CoalesceDeviceListWrites:    true,
		ReadLegacyCheckpoint:        true,
		KeepRecordedDevices:         true,
		DropRemovedResources:        true,
		AllocateTimeout:             endpoint.RecommendedAllocateTimeout,
		PreferredAllocationTimeout:  endpoint.RecommendedPreferredAllocationTimeout,
	}
}

// withDefaults returns c with each zero field set to its documented default. It does not
// check c: New calls Validate first.
func (c Config) withDefaults() Config {
	if c.PluginDir == "" {
		c.PluginDir = pluginapi.DevicePluginPath
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = DefaultGracePeriod
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	if c.QuarantineCorruptCheckpoint == nil {
		on := true
		c.QuarantineCorruptCheckpoint = &on
	}
	if c.Policy.DeferAdmission && c.Policy.DeferAdmissionTimeout == 0 {
		c.Policy.DeferAdmissionTimeout = DefaultDeferAdmissionTimeout
	}
	// The plugin RPC deadlines are the policy's (Validate makes sure the endpoint's are unset).
	c.Endpoint.AllocateTimeout = c.Policy.AllocateTimeout
	c.Endpoint.PreferredAllocationTimeout = c.Policy.PreferredAllocationTimeout
	c.Endpoint.Clock = c.Clock // Validate makes sure it was nil
	if c.Endpoint.Logger.GetSink() == nil {
		c.Endpoint.Logger = c.Logger
	}
	c.Endpoint = c.Endpoint.WithDefaults()
	return c
}

// Validate reports every invalid value in c, joined with errors.Join in the order the fields
// are declared (Endpoint's own errors in its field order, then Policy's). It changes nothing,
// and every zero value is valid. The relative plugin directory error is the kubelet's.
func (c Config) Validate() error {
	var errs []error
	if c.PluginDir != "" && !filepath.IsAbs(c.PluginDir) {
		errs = append(errs, fmt.Errorf("bad socketPath, must be an absolute path: %s", filepath.Join(c.PluginDir, KubeletSocketName)))
	}
	if c.PluginWatcherDir != "" && !filepath.IsAbs(c.PluginWatcherDir) {
		errs = append(errs, fmt.Errorf("plugin watcher dir must be an absolute path: %s", c.PluginWatcherDir))
	}
	if c.GracePeriod < 0 {
		errs = append(errs, fmt.Errorf("grace period must not be negative: %v", c.GracePeriod))
	}
	if err := c.Endpoint.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Endpoint.Clock != nil {
		errs = append(errs, errors.New("endpoint clock must be nil: endpoints use the manager's Clock"))
	}
	if c.Endpoint.AllocateTimeout != 0 || c.Endpoint.PreferredAllocationTimeout != 0 {
		errs = append(errs, errors.New("endpoint AllocateTimeout and PreferredAllocationTimeout must be zero: set Policy.AllocateTimeout and Policy.PreferredAllocationTimeout"))
	}
	if c.Policy.DeferAdmissionTimeout < 0 {
		errs = append(errs, fmt.Errorf("defer admission timeout must not be negative: %v", c.Policy.DeferAdmissionTimeout))
	}
	if c.Policy.AllocateTimeout < 0 {
		errs = append(errs, fmt.Errorf("allocate timeout must not be negative: %v", c.Policy.AllocateTimeout))
	}
	if c.Policy.PreferredAllocationTimeout < 0 {
		errs = append(errs, fmt.Errorf("preferred allocation timeout must not be negative: %v", c.Policy.PreferredAllocationTimeout))
	}
	return errors.Join(errs...)
}

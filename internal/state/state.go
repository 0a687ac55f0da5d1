package state

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// ContainerKey names one container of one pod.
type ContainerKey struct {
	PodUID        string
	ContainerName string
}

// Options are the policy choices the core makes differently from the kubelet.
type Options struct {
	// KeepCompletedInitDevices treats a container that holds a restored allocation, in a pod
	// with any container found running at start, as running itself, so a completed init
	// container keeps its devices across a restart instead of being checked again.
	KeepCompletedInitDevices bool
	// KnowAssignedResources makes Restore treat a resource named only by restored
	// assignments like one the checkpoint registers: known, with no device, until its plugin
	// registers or the grace period ends.
	KnowAssignedResources bool
}

// resource is what the core knows of one device-plugin resource.
type resource struct {
	// devs, healthy and unhealthy are nil until a device list arrives (or the resource is
	// restored from a checkpoint with no devices). healthy ∪ unhealthy are the IDs of devs;
	// a device's set follows its listed health, except after a disconnect, which moves every
	// healthy device to unhealthy and leaves devs as the plugin last listed it.
	devs               *deviceTable
	healthy, unhealthy sets.Set[string]
	// setsFollowList: every listed device is in the set its listed health names. A repeated
	// ID (unhealthy wins) or a disconnect breaks it; a list updated in place restores it.
	setsFollowList bool
	// registered is healthy, sorted, as the checkpoint registers it. Snapshots share its
	// lists: they are replaced, never modified.
	registered registeredCache
	// free is healthy less the devices held or reserved, as available returns it; nil until
	// available needs it after healthy changed. Holds and reservations keep it up to date.
	free sets.Set[string]
	// connected: an instance of the plugin is current and its stream is open.
	connected bool
	// listed: the current instance has sent a device list; named: one with a device in it.
	listed, named bool
	// stoppedAt is when the resource's last instance went away (or when it was restored from
	// the checkpoint); zero while connected.
	stoppedAt time.Time
	// version is the state's listVersion at the last change of devs, healthy or unhealthy
	// (ListVersion).
	version uint64
}

func (r *resource) hasSets() bool { return r.healthy != nil }

// State is the device and assignment state of one manager. The zero value is not usable; use
// New. Its methods must not be called concurrently.
type State struct {
	// listVersion counts changes of any resource's listed devices or health sets; each
	// resource records the count at its last change (ListVersion).
	listVersion uint64
	opts        Options
	resources   map[string]*resource
	pods        podDevices
	// held counts, per resource and device, the containers whose allocation names the device:
	// a device is allocated while its count is positive.
	held    map[string]map[string]int
	order   entryOrder                  // the checkpoint entries of pods, in file order
	pending map[string]sets.Set[string] // devices reserved by allocations in flight
	reuse   map[string]map[string]sets.Set[string]
	running sets.Set[ContainerKey]
	// gained are the pods that gained an assignment or a reuse pool since the last garbage
	// collection; while collectAll is set (never collected, or restored since) the next
	// collection looks at every pod instead (RemoveDeparted).
	gained     sets.Set[string]
	collectAll bool
	// contested are the devices the assignments of more than one pod name (see Contest), and
	// settled the pods whose contests ended since TakeSettled last took them.
	contested contests
	settled   sets.Set[string]
	// capacity is the published CapacityView, the one field readers may use without the
	// owner's lock.
	capacity capacityCell
}

// New returns an empty state.
func New(opts Options) *State {
	return &State{
		opts:      opts,
		resources: map[string]*resource{},
		pods:      podDevices{},
		held:      map[string]map[string]int{},
		pending:   map[string]sets.Set[string]{},
		reuse:     map[string]map[string]sets.Set[string]{},
		running:   sets.New[ContainerKey](),
		// The first collection looks at every pod: the owner's record of the active pods
		// starts with it.
		collectAll: true,
	}
}

// SetRunning records the containers the runtime reported running when the owner started.
func (s *State) SetRunning(keys []ContainerKey) {
	s.running = sets.New(keys...)
}

// Connect records that a new instance of the resource's plugin is current. The device sets
// stay as they are (the previous instance's list, or the checkpoint's empty sets) until the
// instance sends its first list.
func (s *State) Connect(res string) {
	defer s.publishCapacity()
	r := s.resources[res]
	if r == nil {
		r = &resource{}
		s.resources[res] = r
	}
	r.connected, r.listed, r.named, r.stoppedAt = true, false, false, time.Time{}
}

// Disconnect records that the resource's current instance went away at now: every healthy
// device becomes unhealthy (nothing it advertised can be allocated), capacity is kept until
// the grace period ends. It reports whether the resource was known.
func (s *State) Disconnect(res string, now time.Time) bool {
	r := s.resources[res]
	if r == nil {
		return false
	}
	defer s.publishCapacity()
	if r.connected || r.stoppedAt.IsZero() {
		r.stoppedAt = now
	}
	r.connected = false
	if r.hasSets() && r.healthy.Len() > 0 {
		// Move the smaller set into the larger one rather than copying both.
		moved := r.healthy
		if moved.Len() > r.unhealthy.Len() {
			moved, r.unhealthy = r.unhealthy, moved
		}
		for id := range moved {
			r.unhealthy.Insert(id)
		}
		r.healthy, r.free, r.setsFollowList = sets.New[string](), nil, false
		r.registered.changed()
		s.listChanged(r)
	}
	return true
}

// AddRestored makes res a known resource with no devices whose plugin is away since now, as
// for a resource named by the checkpoint: it reports capacity 0 until its plugin registers,
// and is removed when the grace period ends. A resource already known is left alone.
func (s *State) AddRestored(res string, now time.Time) {
	if _, ok := s.resources[res]; ok {
		return
	}
	r := &resource{healthy: sets.New[string](), unhealthy: sets.New[string](),
		devs: newDeviceTable(0), stoppedAt: now}
	s.resources[res] = r
	s.listChanged(r)
	s.publishCapacity()
}

// ApplyDeviceList makes devs the resource's device list, replacing healthy, unhealthy and the
// listed devices entirely, and marks the current instance as listed. It returns the UIDs of
// the pods holding a device that is new or changed health (PodsHolding), the pods whose
// device health the owner reports again. A repeated ID counts once, and as unhealthy if any
// of its entries says so. When the list names the same devices with the same topologies as
// before (a health flip), the sets are updated in place. When no pod holds a device of the
// resource, as at a plugin's first list after a start, the changed IDs are not collected: a
// list of a million devices does not make a list of a million changes. The state keeps
// nothing of devs: the caller may reuse or drop the message. The caller makes sure devs come
// from the current instance.
func (s *State) ApplyDeviceList(res string, devs []*pluginapi.Device) []string {
	collect := len(s.held[res]) > 0
	changed := s.applyDeviceList(res, devs, collect)
	if !collect {
		return nil
	}
	return s.PodsHolding(res, changed)
}

// applyDeviceList is ApplyDeviceList returning the IDs that are new or changed health, each
// once; with collect unset it may return nil instead.
func (s *State) applyDeviceList(res string, devs []*pluginapi.Device, collect bool) []string {
	defer s.publishCapacity()
	r := s.resources[res]
	if r == nil {
		r = &resource{connected: true}
		s.resources[res] = r
	}
	r.listed = true
	r.named = r.named || len(devs) > 0
	s.listChanged(r)
	if changed, ok := r.updateInPlace(devs); ok {
		return changed
	}
	return r.rebuild(devs, collect)
}

// listChanged records that r's listed devices or health sets change now.
func (s *State) listChanged(r *resource) {
	s.listVersion++
	r.version = s.listVersion
}

// ListVersion returns a number that changes whenever the resource's listed devices or their
// health change (a device list applied, a disconnect, a restore), and never goes back to an
// earlier value, also across the resource's removal and return; 0 for an unknown resource. A
// reader that keeps something built from Devices, Healthy and Unhealthy can keep it while
// the version stays the same.
func (s *State) ListVersion(res string) uint64 {
	if r := s.resources[res]; r != nil {
		return r.version
	}
	return 0
}

// gracePeriodExpired reports whether the resource's plugin has been away for more than grace
// (strictly, as the kubelet). A connected resource never expires.
func (r *resource) gracePeriodExpired(now time.Time, grace time.Duration) bool {
	return !r.connected && now.Sub(r.stoppedAt) > grace
}

// Counts is a resource's capacity (healthy and unhealthy devices) and allocatable (healthy).
type Counts struct {
	Capacity, Allocatable int64
}

// Capacity hands each resource with a device list its counts, and removes, returning their
// names sorted, the resources whose plugin has been away for longer than grace: their device
// sets go, the assignments stay. A resource connected without a list yet is neither counted
// nor removed. each may be nil.
func (s *State) Capacity(now time.Time, grace time.Duration, each func(res string, c Counts)) (removed []string) {
	for name, r := range s.resources {
		if !r.hasSets() {
			continue
		}
		if r.gracePeriodExpired(now, grace) {
			removed = append(removed, name)
			continue
		}
		if each != nil {
			each(name, Counts{Capacity: int64(r.healthy.Len() + r.unhealthy.Len()), Allocatable: int64(r.healthy.Len())})
		}
	}
	for _, name := range removed {
		delete(s.resources, name)
	}
	if len(removed) > 0 {
		s.publishCapacity()
	}
	sort.Strings(removed)
	return removed
}

// Forget removes the resource's device sets and plugin record, as Capacity does at the end of
// the grace period.
func (s *State) Forget(res string) {
	delete(s.resources, res)
	s.publishCapacity()
}

// IsDevicePluginResource reports whether the resource is served, or was served and still has
// assignments, by a device plugin.
func (s *State) IsDevicePluginResource(res string) bool {
	if r := s.resources[res]; r != nil && r.hasSets() {
		return true
	}
	return len(s.held[res]) > 0
}

// AwaitingPlugin reports whether the resource has no healthy device only because its plugin
// is not (yet) back: restored from the checkpoint or away within the grace period, or
// connected without having listed any device yet (no list, or only empty ones: some plugins
// send an empty list before their devices are discovered). Deferred admission waits exactly
// then.
func (s *State) AwaitingPlugin(res string, now time.Time, grace time.Duration) bool {
	r := s.resources[res]
	if r == nil || r.healthy.Len() > 0 {
		return false
	}
	if !r.connected {
		return !r.gracePeriodExpired(now, grace)
	}
	return !r.named
}

// GraceLeft returns how long the resource's away plugin has until its grace period is over
// (just past it, since expiry is strict), and whether the plugin is away at all.
func (s *State) GraceLeft(res string, now time.Time, grace time.Duration) (time.Duration, bool) {
	r := s.resources[res]
	if r == nil || r.connected {
		return 0, false
	}
	return max(grace-now.Sub(r.stoppedAt)+time.Millisecond, 0), true
}

// GraceOver reports whether the resource is gone: unknown, or away for longer than grace.
func (s *State) GraceOver(res string, now time.Time, grace time.Duration) bool {
	r := s.resources[res]
	return r == nil || r.gracePeriodExpired(now, grace)
}

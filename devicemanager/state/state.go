package state

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
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
	// all, healthy and unhealthy are nil until a device list arrives (or the resource is
	// restored from a checkpoint with no devices). healthy ∪ unhealthy are the IDs of all,
	// except after a disconnect, which moves every healthy device to unhealthy and leaves all
	// as the plugin last listed it.
	all                map[string]*pluginapi.Device
	healthy, unhealthy sets.Set[string]
	// registered is healthy, sorted, as the checkpoint registers it; nil until a snapshot
	// needs it after healthy changed. Snapshots share it: it is replaced, never modified.
	registered *checkpoint.Registered
	// free is healthy less the devices held or reserved, as Available returns it; nil until
	// Available needs it after healthy changed. Holds and reservations keep it up to date.
	free sets.Set[string]
	// connected: an instance of the plugin is current and its stream is open.
	connected bool
	// listed: the current instance has sent a device list; named: one with a device in it.
	listed, named bool
	// stoppedAt is when the resource's last instance went away (or when it was restored from
	// the checkpoint); zero while connected.
	stoppedAt time.Time
}

func (r *resource) hasSets() bool { return r.healthy != nil }

// State is the device and assignment state of one manager. The zero value is not usable; use
// New. Its methods must not be called concurrently.
type State struct {
	opts      Options
	resources map[string]*resource
	pods      podDevices
	// held counts, per resource and device, the containers whose allocation names the device:
	// a device is allocated while its count is positive.
	held    map[string]map[string]int
	order   entryOrder                  // the checkpoint entries of pods, in file order
	pending map[string]sets.Set[string] // devices reserved by allocations in flight
	reuse   map[string]map[string]sets.Set[string]
	running sets.Set[ContainerKey]
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
	if r.connected || r.stoppedAt.IsZero() {
		r.stoppedAt = now
	}
	r.connected = false
	if r.hasSets() {
		r.unhealthy = r.unhealthy.Union(r.healthy)
		r.healthy, r.registered, r.free = sets.New[string](), nil, nil
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
	s.resources[res] = &resource{healthy: sets.New[string](), unhealthy: sets.New[string](),
		all: map[string]*pluginapi.Device{}, stoppedAt: now}
}

// ApplyDeviceList makes devs the resource's device list, replacing healthy, unhealthy and all
// devices entirely, and marks the current instance as listed. It returns the IDs that are new
// or changed health, each once. A repeated ID counts once, and as unhealthy if any of its
// entries says so. When the list names the same devices as before (a health flip), the sets
// are updated in place. The caller makes sure devs come from the current instance.
func (s *State) ApplyDeviceList(res string, devs []*pluginapi.Device) []string {
	r := s.resources[res]
	if r == nil {
		r = &resource{connected: true}
		s.resources[res] = r
	}
	r.listed = true
	r.named = r.named || len(devs) > 0
	if changed, ok := r.updateInPlace(devs); ok {
		return changed
	}
	return r.rebuild(devs)
}

func (r *resource) rebuild(devs []*pluginapi.Device) []string {
	old := r.all
	var changed []string
	healthy, unhealthy := sets.New[string](), sets.New[string]()
	all := make(map[string]*pluginapi.Device, len(devs))
	for _, d := range devs {
		if d.Health == pluginapi.Healthy {
			healthy.Insert(d.ID)
		} else {
			unhealthy.Insert(d.ID)
		}
		if _, repeated := all[d.ID]; !repeated {
			if prev, ok := old[d.ID]; !ok || prev.Health != d.Health {
				changed = append(changed, d.ID)
			}
		}
		all[d.ID] = d
	}
	// A repeated ID makes healthy and unhealthy overlap; unhealthy wins, as the list's
	// last word for that ID may be either and a device in both sets could be allocated.
	healthy = healthy.Difference(unhealthy)
	r.healthy, r.unhealthy, r.all, r.registered, r.free = healthy, unhealthy, all, nil, nil
	return changed
}

// updateInPlace applies a list that names exactly the current devices by updating the
// existing sets and map; it reports false, having changed nothing, when the list adds or drops
// a device. A list that repeats an ID is detected after the update and rebuilt from scratch,
// with every listed device reported as changed.
func (r *resource) updateInPlace(devs []*pluginapi.Device) ([]string, bool) {
	if r.all == nil || !r.hasSets() || len(r.all) != len(devs) {
		return nil, false
	}
	for _, d := range devs {
		if _, ok := r.all[d.ID]; !ok {
			return nil, false
		}
	}
	var changed []string
	for _, d := range devs {
		if r.all[d.ID].Health != d.Health {
			changed = append(changed, d.ID)
		}
		// The sets, not the old list, decide: a disconnect moves devices to unhealthy
		// without touching their listed health.
		if isHealthy := d.Health == pluginapi.Healthy; isHealthy != r.healthy.Has(d.ID) {
			r.registered, r.free = nil, nil
			if isHealthy {
				r.unhealthy.Delete(d.ID)
				r.healthy.Insert(d.ID)
			} else {
				r.healthy.Delete(d.ID)
				r.unhealthy.Insert(d.ID)
			}
		}
		r.all[d.ID] = d
	}
	// Same length and every ID current: a repeated ID means another current ID is missing.
	// Each entry now holds the last device listed under its ID, so a repeat shows as an
	// earlier device that is not its ID's entry.
	for _, d := range devs {
		if r.all[d.ID] != d {
			r.all = nil
			r.rebuild(devs)
			return sets.List(sets.KeySet(r.all)), true
		}
	}
	return changed, true
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

// Capacity returns the counts of every resource with a device list, and removes, returning
// their names sorted, the resources whose plugin has been away for longer than grace: their
// device sets go, the assignments stay. A resource connected without a list yet is neither
// counted nor removed.
func (s *State) Capacity(now time.Time, grace time.Duration) (map[string]Counts, []string) {
	out := map[string]Counts{}
	var removed []string
	for name, r := range s.resources {
		if !r.hasSets() {
			continue
		}
		if r.gracePeriodExpired(now, grace) {
			removed = append(removed, name)
			continue
		}
		out[name] = Counts{Capacity: int64(r.healthy.Len() + r.unhealthy.Len()), Allocatable: int64(r.healthy.Len())}
	}
	for _, name := range removed {
		delete(s.resources, name)
	}
	sort.Strings(removed)
	return out, removed
}

// Forget removes the resource's device sets and plugin record, as Capacity does at the end of
// the grace period.
func (s *State) Forget(res string) { delete(s.resources, res) }

// IsDevicePluginResource reports whether the resource is served, or was served and still has
// assignments, by a device plugin.
func (s *State) IsDevicePluginResource(res string) bool {
	if r := s.resources[res]; r != nil && r.hasSets() {
		return true
	}
	return len(s.held[res]) > 0
}

// Known reports whether the resource has a plugin record (connected, or away within or past
// its grace period and not yet removed).
func (s *State) Known(res string) bool { _, ok := s.resources[res]; return ok }

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

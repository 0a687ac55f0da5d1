package state

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// rebuild replaces the resource's list and sets with devs' and returns the IDs that are new
// or changed health. The maps are sized from devs up front and every ID is copied into one
// string, so the resource keeps no part of the message. A long list whose IDs are distinct
// (rebuildConcurrently) is built on two goroutines; others in one pass (rebuildInOrder).
// Unless collect, it returns no IDs and does not look for them.
func (r *resource) rebuild(devs []*pluginapi.Device, collect bool) []string {
	ids := copyIDs(devs)
	if len(devs) >= concurrentRebuildMin {
		if changed, ok := r.rebuildConcurrently(devs, ids, collect); ok {
			return changed
		}
	}
	return r.rebuildInOrder(devs, ids, collect)
}

// concurrentRebuildMin is the list length from which rebuild tries rebuildConcurrently. A
// variable for the tests, which run both paths on short lists.
var concurrentRebuildMin = 4096

// listIDs are the IDs of a device list, copied into one string in the list's order.
type listIDs struct {
	all      string
	nHealthy int // devices listed Healthy, repeats included
}

func copyIDs(devs []*pluginapi.Device) listIDs {
	n := 0
	for _, d := range devs {
		n += len(d.ID)
	}
	var b strings.Builder
	b.Grow(n)
	ids := listIDs{}
	for _, d := range devs {
		b.WriteString(d.ID)
		if d.Health == pluginapi.Healthy {
			ids.nHealthy++
		}
	}
	ids.all = b.String()
	return ids
}

// each calls f with each device of devs, the list the IDs were copied from, and its ID's copy.
func (ids listIDs) each(devs []*pluginapi.Device, f func(i int, d *pluginapi.Device, id string)) {
	at := 0
	for i, d := range devs {
		f(i, d, ids.all[at:at+len(d.ID)])
		at += len(d.ID)
	}
}

// changedSince returns a list for the IDs changed since old, sized for all of them when old
// lists nothing; none unless collect.
func changedSince(old *deviceTable, n int, collect bool) []string {
	if collect && (old == nil || len(old.byID) == 0) {
		return make([]string, 0, n)
	}
	return nil
}

// rebuildConcurrently is rebuild for a list that names no ID twice. Inserting a million IDs
// into two maps is mostly waiting for memory, so the health sets are built on a second
// goroutine while this one builds the table, where a repeated ID shows. It reports false,
// having changed nothing, when one does. The second goroutine also keeps the healthy IDs in
// the list's order, which the checkpoint's registered list is sorted from.
func (r *resource) rebuildConcurrently(devs []*pluginapi.Device, ids listIDs, collect bool) ([]string, bool) {
	var healthy, unhealthy sets.Set[string]
	var inList []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		healthy = make(sets.Set[string], ids.nHealthy)
		unhealthy = make(sets.Set[string], len(devs)-ids.nHealthy)
		inList = make([]string, 0, ids.nHealthy)
		ids.each(devs, func(_ int, d *pluginapi.Device, id string) {
			if d.Health == pluginapi.Healthy {
				healthy[id] = sets.Empty{}
				inList = append(inList, id)
			} else {
				unhealthy[id] = sets.Empty{}
			}
		})
	}()
	old, l := r.devs, newDeviceTable(len(devs))
	topo := topologyInterner{l: l}
	changed := changedSince(old, len(devs), collect)
	repeated := false
	ids.each(devs, func(i int, d *pluginapi.Device, id string) {
		if repeated {
			return
		}
		info := deviceInfo{index: uint32(i)}.withTopology(topo.intern(d.Topology))
		l.byID[id] = l.setHealth(id, info, d.Health)
		if repeated = len(l.byID) == i; repeated {
			return
		}
		if !collect {
			return
		}
		if prev, ok := old.lookup(id); !ok || prev.Health != d.Health {
			changed = append(changed, id)
		}
	})
	<-done
	if repeated {
		return nil, false
	}
	r.registered.rebuilt(inList)
	r.devs, r.healthy, r.unhealthy, r.free = l, healthy, unhealthy, nil
	r.setsFollowList = true
	return changed, true
}

// rebuildInOrder is rebuild in one pass: for short lists, and for lists that name an ID more
// than once, where the last entry gives the ID's listed health and topology and an unhealthy
// entry wins its set.
func (r *resource) rebuildInOrder(devs []*pluginapi.Device, ids listIDs, collect bool) []string {
	old, l := r.devs, newDeviceTable(len(devs))
	topo := topologyInterner{l: l}
	healthy := make(sets.Set[string], ids.nHealthy)
	unhealthy := make(sets.Set[string], len(devs)-ids.nHealthy)
	changed := changedSince(old, len(devs), collect)
	repeats := false
	ids.each(devs, func(_ int, d *pluginapi.Device, key string) {
		// The sets tell a repeated ID, without a lookup in the table: unhealthy wins.
		var repeated bool
		if d.Health == pluginapi.Healthy {
			if repeated = unhealthy.Has(key); !repeated {
				n := len(healthy)
				healthy.Insert(key)
				repeated = len(healthy) == n
			}
		} else {
			n := len(unhealthy)
			unhealthy.Insert(key)
			if repeated = len(unhealthy) == n || healthy.Has(key); repeated {
				healthy.Delete(key)
			}
		}
		if repeated {
			repeats = true
			info := l.byID[key]
			l.topologies[info.topology()].devices--
			info = info.withTopology(topo.intern(d.Topology))
			l.byID[key] = l.setHealth(key, info, d.Health)
			return
		}
		info := deviceInfo{index: uint32(len(l.byID))}.withTopology(topo.intern(d.Topology))
		l.byID[key] = l.setHealth(key, info, d.Health)
		if !collect {
			return
		}
		if prev, ok := old.lookup(key); !ok || prev.Health != d.Health {
			changed = append(changed, key)
		}
	})
	r.registered.changed()
	r.devs, r.healthy, r.unhealthy, r.free = l, healthy, unhealthy, nil
	r.setsFollowList = !repeats
	return changed
}

// updateInPlace applies a list that names exactly the current devices, each with its current
// topology and once, by updating the existing sets and list where health changed; it reports
// false, having changed nothing, for any other list. A list of as many entries as current
// devices, all current but one repeated, is rebuilt from scratch, with every listed device
// reported as changed. Its cost is a lookup per device; only changed devices are written.
func (r *resource) updateInPlace(devs []*pluginapi.Device) ([]string, bool) {
	l := r.devs
	if l == nil || !r.hasSets() || len(l.byID) != len(devs) {
		return nil, false
	}
	infos := make([]deviceInfo, len(devs))
	seen := make([]uint64, (len(devs)+63)/64)
	repeated, topologyChanged := false, false
	for i, d := range devs {
		info, ok := l.byID[d.ID]
		if !ok {
			return nil, false
		}
		infos[i] = info
		word, bit := info.index/64, uint64(1)<<(info.index%64)
		repeated = repeated || seen[word]&bit != 0
		seen[word] |= bit
		topologyChanged = topologyChanged || !l.isTopology(info.topology(), d.Topology)
	}
	if repeated {
		// Same length and every ID current: a repeated ID means another is missing.
		r.devs = nil
		r.rebuild(devs, true)
		ids := make([]string, 0, len(r.devs.byID))
		for id := range r.devs.byID {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return ids, true
	}
	if topologyChanged {
		return nil, false // rebuilt: same result, and the table keeps no unused topology
	}
	var changed []string
	for i, d := range devs {
		info := infos[i]
		code := healthCodeOf(d.Health)
		listedChanged := code != info.health() || (code == healthOther && l.otherHealth[d.ID] != d.Health)
		// The sets, not the old list, decide: a disconnect moves devices to unhealthy
		// without touching their listed health.
		isHealthy := code == healthHealthy
		var moves bool
		if r.setsFollowList {
			moves = isHealthy != (info.health() == healthHealthy)
		} else {
			moves = isHealthy != r.healthy.Has(d.ID)
		}
		if !listedChanged && !moves {
			continue
		}
		// A stored key must not be the message's: it would keep the whole message.
		key := strings.Clone(d.ID)
		if listedChanged {
			changed = append(changed, key)
			l.byID[key] = l.setHealth(key, info, d.Health)
		}
		if moves {
			r.free = nil
			r.registered.touch(key)
			if isHealthy {
				r.unhealthy.Delete(key)
				r.healthy.Insert(key)
			} else {
				r.healthy.Delete(key)
				r.unhealthy.Insert(key)
			}
		}
	}
	r.setsFollowList = true
	return changed, true
}

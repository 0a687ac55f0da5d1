package state

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// rebuild replaces the resource's list and sets with devs' and returns the IDs that are new
// or changed health. The maps are sized from devs up front and every ID is copied into one
// string, so the resource keeps no part of the message.
func (r *resource) rebuild(devs []*pluginapi.Device) []string {
	old := r.devs
	nHealthy, idBytes := 0, 0
	for _, d := range devs {
		if d.Health == pluginapi.Healthy {
			nHealthy++
		}
		idBytes += len(d.ID)
	}
	var arena strings.Builder
	arena.Grow(idBytes)
	l := newDeviceTable(len(devs))
	topo := topologyInterner{l: l}
	healthy := make(sets.Set[string], nHealthy)
	unhealthy := make(sets.Set[string], len(devs)-nHealthy)
	var changed []string
	if old == nil || len(old.byID) == 0 {
		changed = make([]string, 0, len(devs))
	}
	repeats := false
	for _, d := range devs {
		start := arena.Len()
		arena.WriteString(d.ID)
		key := arena.String()[start:]
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
			// The last entry gives the listed health and topology.
			repeats = true
			info := l.byID[key]
			l.topologies[info.topology()].devices--
			info = info.withTopology(topo.intern(d.Topology))
			l.byID[key] = l.setHealth(key, info, d.Health)
			continue
		}
		info := deviceInfo{index: uint32(len(l.byID))}.withTopology(topo.intern(d.Topology))
		l.byID[key] = l.setHealth(key, info, d.Health)
		if prev, ok := old.lookup(key); !ok || prev.Health != d.Health {
			changed = append(changed, key)
		}
	}
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
		r.rebuild(devs)
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

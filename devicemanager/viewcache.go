package devicemanager

import (
	"cmp"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/util/sets"
)

// viewCache keeps the device views Resources returned, per resource, so that the status
// page's and the agent's once-a-second calls neither hold mu for work that grows with the
// number of devices nor copy a million devices when nothing changed: a resource's listed
// devices are read again only after they or their health changed (the state's ListVersion of
// that resource moved), and sorted and turned into views without mu. A change of one
// resource costs nothing for the others.
// Holders and reservations, which are few, are read at every call; the views are rebuilt,
// from the listed devices kept, only for a resource whose holders or reservations changed.
//
// Its mutex is taken by Resources before mu, never while mu is held, and held while views are
// built, so that concurrent callers build them once. It guards the fields below.
type viewCache struct {
	mu    sync.Mutex
	byRes map[string]*cachedViews
}

// cachedViews is what a resource's views were built from, and the views.
type cachedViews struct {
	// version is the resource's ListVersion when listed was read.
	version uint64
	// listed are the devices in the plugin's list or the device sets, sorted by ID, without
	// holders or reservations.
	listed []DeviceView
	// unlisted marks the entries of listed that are in the sets but not in the plugin's list
	// (nil when there are none): their NUMA nodes are those recorded for their holders.
	unlisted map[string]bool
	// held and reserved are the holders and reservations views was built with.
	held     map[string][]deviceHolder
	reserved []string
	views    []DeviceView
}

// listedDevice is a device as read under mu, to be made a view without it.
type listedDevice struct {
	id, health string
	nodes      []int64 // the state's: read only
	unlisted   bool
}

// deviceRead is what Resources reads of one resource under mu.
type deviceRead struct {
	version  uint64
	held     map[string][]deviceHolder
	reserved []string
	// devices is nil when the cached listed devices are still current.
	devices []listedDevice
}

// readDevicesLocked reads what the resource's views need, the listed devices only when the
// cache has none current. Callers hold mu and c.mu.
func (m *Manager) readDevicesLocked(c *viewCache, res string, held map[string][]deviceHolder) deviceRead {
	r := deviceRead{version: m.st.ListVersion(res), held: held, reserved: m.st.ReservedIDs(res)}
	if cv := c.byRes[res]; cv != nil && cv.version == r.version {
		return r
	}
	healthy, unhealthy := m.st.Healthy(res), m.st.Unhealthy(res)
	healthOf := func(id string) string {
		switch {
		case healthy.Has(id):
			return DeviceHealthy
		case unhealthy.Has(id):
			return DeviceUnhealthy
		}
		return DeviceUnknown
	}
	r.devices = make([]listedDevice, 0, healthy.Len()+unhealthy.Len())
	for id, d := range m.st.Devices(res) {
		r.devices = append(r.devices, listedDevice{id: id, health: healthOf(id), nodes: d.NUMANodes})
	}
	if len(r.devices) != healthy.Len()+unhealthy.Len() {
		// The sets name a device the plugin's list does not (or the list names one twice):
		// not expected, but shown as the sets have it.
		for id := range healthy.Union(unhealthy) {
			if !m.st.IsListed(res, id) {
				r.devices = append(r.devices, listedDevice{id: id, health: healthOf(id), unlisted: true})
			}
		}
	}
	return r
}

// views returns the resource's device views for what was read under mu, reusing what the
// cache holds where it is current. Callers hold c.mu, not the manager's mu.
func (c *viewCache) views(res string, r deviceRead) []DeviceView {
	cv := c.byRes[res]
	if r.devices != nil || cv == nil {
		cv = &cachedViews{version: r.version}
		cv.listed, cv.unlisted = listedViews(r.devices)
		if c.byRes == nil {
			c.byRes = map[string]*cachedViews{}
		}
		c.byRes[res] = cv
	} else if cv.views != nil && sameHolders(cv.held, r.held) && slices.Equal(cv.reserved, r.reserved) {
		return cv.views
	}
	cv.held, cv.reserved = r.held, r.reserved
	cv.views = mergeViews(cv.listed, cv.unlisted, r.held, r.reserved)
	return cv.views
}

// forgetExcept drops the cached views of resources not in names.
func (c *viewCache) forgetExcept(names sets.Set[string]) {
	for res := range c.byRes {
		if !names.Has(res) {
			delete(c.byRes, res)
		}
	}
}

// listedViews sorts devices by ID and makes them views without holders or reservations.
func listedViews(devices []listedDevice) ([]DeviceView, map[string]bool) {
	slices.SortFunc(devices, func(a, b listedDevice) int { return cmp.Compare(a.id, b.id) })
	out := make([]DeviceView, len(devices))
	var unlisted map[string]bool
	for i, d := range devices {
		out[i] = DeviceView{ID: d.id, Health: d.health, NUMANodes: viewNodes(d.nodes)}
		if d.unlisted {
			if unlisted == nil {
				unlisted = map[string]bool{}
			}
			unlisted[d.id] = true
		}
	}
	return out, unlisted
}

// noNodes is the NUMANodes of a view without topology: empty, not nil.
var noNodes = []int64{}

// viewNodes returns nodes ascending and without repeats, sharing nodes (clipped, so that an
// append copies it) when it already is, as plugins send them.
func viewNodes(nodes []int64) []int64 {
	if len(nodes) == 0 {
		return noNodes
	}
	for i := 1; i < len(nodes); i++ {
		if nodes[i-1] >= nodes[i] {
			return sets.List(sets.New(nodes...))
		}
	}
	return slices.Clip(nodes)
}

// mergeViews returns listed (sorted by ID) with each device's holders and reservation, and
// a view for each held device that is in neither: health unknown, NUMA nodes those recorded
// for its holders. listed is not modified.
func mergeViews(listed []DeviceView, unlisted map[string]bool, held map[string][]deviceHolder, reserved []string) []DeviceView {
	out := slices.Clone(listed)
	if out == nil {
		out = []DeviceView{}
	}
	var extra []DeviceView
	for id, hs := range held {
		// A device no plugin lists takes the NUMA nodes recorded for its holders.
		var v *DeviceView
		holderNodes := unlisted[id]
		if i, found := slices.BinarySearchFunc(out, id, compareViewID); found {
			v = &out[i]
		} else {
			extra = append(extra, DeviceView{ID: id, Health: DeviceUnknown})
			v, holderNodes = &extra[len(extra)-1], true
		}
		var nodes []int64
		for _, h := range hs {
			v.Holders = append(v.Holders, h.key)
			nodes = append(nodes, h.nodes...)
		}
		if holderNodes {
			v.NUMANodes = sets.List(sets.New(append(slices.Clone(v.NUMANodes), nodes...)...))
		}
	}
	if len(extra) > 0 {
		slices.SortFunc(extra, func(a, b DeviceView) int { return cmp.Compare(a.ID, b.ID) })
		merged := make([]DeviceView, 0, len(out)+len(extra))
		i := 0
		for _, e := range extra {
			for i < len(out) && out[i].ID < e.ID {
				merged = append(merged, out[i])
				i++
			}
			merged = append(merged, e)
		}
		out = append(merged, out[i:]...)
	}
	for _, id := range reserved {
		if i, found := slices.BinarySearchFunc(out, id, compareViewID); found {
			out[i].Reserved = true
		}
	}
	return out
}

func compareViewID(v DeviceView, id string) int { return cmp.Compare(v.ID, id) }

// sameHolders reports whether two holder indexes of one resource are equal.
func sameHolders(a, b map[string][]deviceHolder) bool {
	if len(a) != len(b) {
		return false
	}
	for id, ha := range a {
		hb, ok := b[id]
		if !ok || !slices.EqualFunc(ha, hb, func(x, y deviceHolder) bool {
			return x.key == y.key && slices.Equal(x.nodes, y.nodes)
		}) {
			return false
		}
	}
	return true
}

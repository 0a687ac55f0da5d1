package state

import (
	"slices"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// registeredCache keeps a resource's healthy devices sorted, as the checkpoint registers
// them, from one snapshot to the next. A change to the healthy set only marks it stale; the
// next snapshot brings it up to date from the last non-empty list it computed (base): from
// the devices it was told entered or left healthy (touch) when it knows them all, by
// dropping the devices no longer healthy when none entered, and by reusing base itself (and
// its encoding) when healthy is back to it, as when a plugin returns after a disconnect with
// the same devices. Only a list with new devices is sorted again. So a burst of changes costs
// at most one pass over the list, at the next snapshot. A device whose health flaps takes the
// list back and forth between two values: the one before base is kept too (prev), and reused,
// with its encoding and its part of the checksum, when the list returns to it. The zero value
// is empty and stale.
type registeredCache struct {
	// last is the list as last returned; current while fresh.
	last  *checkpoint.Registered
	fresh bool
	// base is the last non-empty list computed: the one a new list is derived from.
	base *checkpoint.Registered
	// prev is the base before base, for lists of up to maxPrevIDs devices.
	prev *checkpoint.Registered
	// touched holds the IDs that entered or left healthy since base was computed, unless
	// untracked: more changed than are worth tracking, some changed without being told, or
	// healthy was empty at a snapshot since.
	touched   []string
	untracked bool
	// listed, when not nil, is healthy in the order of the device list it was rebuilt from:
	// a sort reads its IDs in the order they lie in memory, which is faster than the set's.
	listed []string
}

// maxPrevIDs bounds the lists a cache keeps a second of (prev): a larger one would double
// the memory of a large plugin's list.
const maxPrevIDs = 1 << 16

// maxTouched bounds the IDs a cache of n devices tracks as changed: beyond it, a pass over
// the whole list costs about as much.
func maxTouched(n int) int { return n/16 + 64 }

// changed marks the cache stale after healthy changed in ways it was not told about.
func (c *registeredCache) changed() {
	c.fresh, c.touched, c.untracked, c.listed = false, nil, true, nil
}

// rebuilt marks the cache stale after healthy was rebuilt from a device list; inList are its
// members in the list's order. The cache keeps inList and may sort it in place.
func (c *registeredCache) rebuilt(inList []string) {
	c.changed()
	c.listed = inList
}

// touch marks the cache stale after id entered or left healthy.
func (c *registeredCache) touch(id string) {
	c.fresh, c.listed = false, nil
	if c.untracked {
		return
	}
	if c.base == nil || len(c.touched) >= maxTouched(len(c.base.IDs)) {
		c.touched, c.untracked = nil, true
		return
	}
	c.touched = append(c.touched, id)
}

// get returns the checkpoint's record of healthy, the resource's current healthy set.
func (c *registeredCache) get(name string, healthy sets.Set[string]) *checkpoint.Registered {
	if c.fresh && c.last != nil {
		return c.last
	}
	defer func() { c.listed = nil }() // used or outdated: not worth its memory
	if healthy.Len() == 0 {
		if c.last == nil || len(c.last.IDs) != 0 {
			c.last = checkpoint.NewRegistered(name, []string{})
		}
		c.fresh, c.touched, c.untracked = true, nil, true
		return c.last
	}
	if ids, same := c.update(healthy); !same {
		next := c.prev
		if next == nil || !slices.Equal(next.IDs, ids) {
			next = checkpoint.NewRegistered(name, ids)
		}
		c.prev = nil
		if c.base != nil && len(c.base.IDs) <= maxPrevIDs {
			c.prev = c.base
		}
		c.base = next
	}
	c.last = c.base
	c.fresh, c.touched, c.untracked = true, nil, false
	return c.last
}

// update returns healthy sorted, and whether that is base's list unchanged.
func (c *registeredCache) update(healthy sets.Set[string]) (ids []string, same bool) {
	if c.base == nil {
		return c.sorted(healthy), false
	}
	prev := c.base.IDs
	if !c.untracked {
		if ids, same, ok := applyTouched(prev, c.touched, healthy); ok {
			return ids, same
		}
	}
	kept := 0
	for _, id := range prev {
		if healthy.Has(id) {
			kept++
		}
	}
	switch {
	case kept == len(prev) && kept == healthy.Len():
		return prev, true
	case kept == healthy.Len():
		out := make([]string, 0, kept)
		for _, id := range prev {
			if healthy.Has(id) {
				out = append(out, id)
			}
		}
		return out, false
	default:
		return c.sorted(healthy), false
	}
}

// sorted returns healthy sorted: the list order of its members sorted in place, when the
// cache has it, and the set's members sorted otherwise.
func (c *registeredCache) sorted(healthy sets.Set[string]) []string {
	if ids := c.listed; len(ids) == healthy.Len() {
		c.listed = nil
		sortIDs(ids)
		return ids
	}
	return sortedSet(healthy)
}

// applyTouched returns prev, a sorted list, with the touched IDs added or dropped as healthy
// has them now; whether that is prev itself, unchanged; and whether it accounts for every
// healthy device (if not, ids is nil). Its cost is a lookup per touched ID and one copy of
// the list.
func applyTouched(prev, touched []string, healthy sets.Set[string]) (ids []string, same, ok bool) {
	touched = slices.Clone(touched)
	slices.Sort(touched)
	touched = slices.Compact(touched)
	var drop []int   // positions in prev, ascending
	var add []string // ascending
	var addAt []int  // where each added ID goes in prev
	for _, id := range touched {
		i, inPrev := slices.BinarySearch(prev, id)
		switch now := healthy.Has(id); {
		case inPrev && !now:
			drop = append(drop, i)
		case !inPrev && now:
			add, addAt = append(add, id), append(addAt, i)
		}
	}
	if len(prev)-len(drop)+len(add) != healthy.Len() {
		return nil, false, false
	}
	if len(drop) == 0 && len(add) == 0 {
		return prev, true, true
	}
	out := make([]string, 0, healthy.Len())
	from := 0
	for {
		next := len(prev)
		if len(drop) > 0 {
			next = min(next, drop[0])
		}
		if len(addAt) > 0 {
			next = min(next, addAt[0])
		}
		out = append(out, prev[from:next]...)
		from = next
		switch {
		case len(addAt) > 0 && addAt[0] == next: // goes before prev[next]
			out = append(out, add[0])
			add, addAt = add[1:], addAt[1:]
		case len(drop) > 0 && drop[0] == next:
			from = next + 1
			drop = drop[1:]
		default:
			return out, false, true
		}
	}
}

// sortedSet returns the members of s in ascending order.
func sortedSet(s sets.Set[string]) []string {
	out := make([]string, 0, s.Len())
	for id := range s {
		out = append(out, id)
	}
	sortIDs(out)
	return out
}

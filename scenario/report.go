package scenario

import (
	"fmt"
	"sort"
	"strings"
)

// capacityLines reports every resource the manager knows.
func (r *Runner) capacityLines() []string {
	c, a, _ := r.m.GetCapacity()
	var names []string
	for n := range c {
		names = append(names, string(n))
	}
	sort.Strings(names)
	if len(names) == 0 {
		return []string{"capacity: no device resources"}
	}
	var out []string
	for _, n := range names {
		cq := c[v1Name(n)]
		aq := a[v1Name(n)]
		out = append(out, fmt.Sprintf("%s: capacity %d, allocatable %d", n, cq.Value(), aq.Value()))
	}
	return out
}

// allCounts snapshots capacity and allocatable of every resource seen so far.
func (r *Runner) allCounts() map[string][2]int64 {
	out := map[string][2]int64{}
	for name := range r.plugins {
		c, a := r.counts(r.resource(name))
		out[r.resource(name)] = [2]int64{c, a}
	}
	return out
}

// allocationLines lists every pod's state and each container's devices.
func (r *Runner) allocationLines() []string {
	var out []string
	for _, name := range r.order {
		p := r.pods[name]
		r.mu.Lock()
		state := p.state
		if p.completed {
			state += ", completed"
		}
		r.mu.Unlock()
		line := name + " (" + state + ")"
		var parts []string
		for _, c := range allContainers(p.obj) {
			for res, nodes := range r.m.GetDevices(string(p.obj.UID), c.Name) {
				ids := make([]string, 0, len(nodes))
				for id := range nodes {
					ids = append(ids, id)
				}
				sort.Strings(ids)
				parts = append(parts, fmt.Sprintf("%s=%s[%s]", c.Name, strings.TrimPrefix(res, "example.com/"), strings.Join(ids, " ")))
			}
		}
		sort.Strings(parts)
		if len(parts) > 0 {
			line += ": " + strings.Join(parts, " ")
		}
		out = append(out, line)
	}
	if len(out) == 0 {
		return []string{"no pods"}
	}
	return out
}

// checkExclusive reports a device held by containers of two different live pods, or by two
// app containers or sidecars of one pod (init containers share with their own pod by design).
func (r *Runner) checkExclusive() string {
	owner := map[string]string{}
	r.mu.Lock()
	var live []*pod
	for _, name := range r.order {
		if p := r.pods[name]; p.state != "deleted" && p.state != "rejected" {
			live = append(live, p)
		}
	}
	r.mu.Unlock()
	contested := map[string]bool{} // held by every claimant on purpose (devicemanager.Contest)
	for _, c := range r.m.Contests() {
		contested[c.Resource+"/"+c.DeviceID] = true
	}
	for _, p := range live {
		for _, c := range allContainers(p.obj) {
			regularInit := false
			for _, ic := range p.obj.Spec.InitContainers {
				if ic.Name == c.Name && ic.RestartPolicy == nil {
					regularInit = true
				}
			}
			for res, nodes := range r.m.GetDevices(string(p.obj.UID), c.Name) {
				for id := range nodes {
					key := res + "/" + id
					if contested[key] {
						continue
					}
					who := p.obj.Name + "/" + c.Name
					prev, taken := owner[key]
					switch {
					case !taken:
						owner[key] = who
					case regularInit && strings.HasPrefix(prev, p.obj.Name+"/"):
					case strings.HasPrefix(prev, p.obj.Name+"/init-"):
						owner[key] = who
					default:
						return fmt.Sprintf("INVARIANT VIOLATED: %s held by %s and %s", key, prev, who)
					}
				}
			}
		}
	}
	return ""
}

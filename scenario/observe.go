package scenario

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kdm-project/kdm/checkpoint"
)

// Observation is what can be seen of the node from outside the device manager after a
// command, in a form two drivers of the same core can be compared by (package explore's
// lockstep check compares its simulation with a Runner's real manager after every step).
// Every list is sorted, except Pods, which is in arrival order.
type Observation struct {
	// Pods: "NAME STATE", STATE being admitted, waiting, rejected or deleted, followed by
	// " running" while its containers run, " completed" once they exited, and for a
	// rejection ": " and its reason.
	Pods []string
	// Allocations: "POD/CONTAINER RESOURCE ID,ID" for every container of a pod in the pod
	// source that holds devices.
	Allocations []string
	// Capacity: "RESOURCE CAPACITY/ALLOCATABLE" for every resource the manager reports.
	Capacity []string
	// Checkpoint: the file's assignments, "PODUID/CONTAINER RESOURCE ID,ID", and registered
	// resources, "registered RESOURCE ID,ID"; or the one line "none" or "unreadable".
	Checkpoint []string
}

// String prints the observation, one section per line group.
func (o Observation) String() string {
	var b strings.Builder
	for _, s := range []struct {
		name  string
		lines []string
	}{{"pods", o.Pods}, {"allocations", o.Allocations}, {"capacity", o.Capacity}, {"checkpoint", o.Checkpoint}} {
		fmt.Fprintf(&b, "%s:\n", s.name)
		for _, l := range s.lines {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	return b.String()
}

// PodLine is an Observation's line for one pod.
func PodLine(name, state string, running, completed bool, reason string) string {
	line := name + " " + state
	if running {
		line += " running"
	}
	if completed {
		line += " completed"
	}
	if reason != "" {
		line += ": " + reason
	}
	return line
}

// CheckpointLines are an Observation's checkpoint lines for a file's content (nil: no file).
func CheckpointLines(b []byte) []string {
	if b == nil {
		return []string{"none"}
	}
	d, _, err := checkpoint.Decode(b)
	if err != nil {
		return []string{"unreadable"}
	}
	var out []string
	for _, e := range d.PodDeviceEntries {
		var ids []string
		for _, l := range e.DeviceIDs {
			ids = append(ids, l...)
		}
		sort.Strings(ids)
		out = append(out, fmt.Sprintf("%s/%s %s %s", e.PodUID, e.ContainerName, e.ResourceName, strings.Join(ids, ",")))
	}
	for res, ids := range d.RegisteredDevices {
		ids = append([]string(nil), ids...)
		sort.Strings(ids)
		out = append(out, fmt.Sprintf("registered %s %s", res, strings.Join(ids, ",")))
	}
	sort.Strings(out)
	return out
}

// Observe returns what can be seen of the node now (Observation). It waits for the
// checkpoint writes in flight, so that the file matches the manager.
func (r *Runner) Observe() Observation {
	var o Observation
	r.m.WaitForCheckpointWrites()
	c, a, _ := r.m.GetCapacity()
	for n, cq := range c {
		aq := a[n]
		o.Capacity = append(o.Capacity, fmt.Sprintf("%s %d/%d", n, cq.Value(), aq.Value()))
	}
	sort.Strings(o.Capacity)
	r.mu.Lock()
	for _, name := range r.order {
		p := r.pods[name]
		o.Pods = append(o.Pods, PodLine(name, p.state, p.running, p.completed, p.reason))
		if p.state == "deleted" || p.state == "rejected" {
			continue
		}
		for _, ctr := range allContainers(p.obj) {
			for _, e := range r.m.GetContainerAllocations(string(p.obj.UID), ctr.Name) {
				var ids []string
				for _, l := range e.DeviceIDs {
					ids = append(ids, l...)
				}
				sort.Strings(ids)
				o.Allocations = append(o.Allocations, fmt.Sprintf("%s/%s %s %s", name, ctr.Name, e.ResourceName, strings.Join(dedup(ids), ",")))
			}
		}
	}
	r.mu.Unlock()
	sort.Strings(o.Allocations)
	b, err := os.ReadFile(filepath.Join(r.dir, checkpoint.FileName))
	if err != nil {
		b = nil
	}
	o.Checkpoint = CheckpointLines(b)
	return o
}

// dedup removes repeated neighbours from a sorted list.
func dedup(ids []string) []string {
	out := ids[:0]
	for i, id := range ids {
		if i == 0 || id != ids[i-1] {
			out = append(out, id)
		}
	}
	return out
}

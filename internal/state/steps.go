package state

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// StepKind names what a container's allocation asks of its owner next.
type StepKind int

const (
	// StepDone: the container's allocation is over. Step.Err is nil when it succeeded (its
	// devices are committed and written, and the pod's reuse pool is updated) and otherwise
	// the reason to reject the pod, with Step.Resource the resource it is about; every
	// reservation is released and nothing is recorded.
	StepDone StepKind = iota
	// StepPassOver: Step.Resource needs nothing from a device plugin (none serves it); the
	// owner has nothing to do. The simulator ends a step of its own here.
	StepPassOver
	// StepAwaitUnknown: the container asks for Step.Resource, which no plugin serves. The
	// owner decides whether to wait for one (deferred admission) and reports with Served.
	StepAwaitUnknown
	// StepCollect: garbage-collect the pods that are no longer active, once per container,
	// before its first device-plugin resource is selected. No report.
	StepCollect
	// StepSelect: choose and reserve Step.Required devices of Step.Resource, taking from
	// Step.Reusable first (Select, waiting out a plugin that is not back when the policy
	// says so), and report with Selected.
	StepSelect
	// StepAllocate: ask the plugin of Step.Pick.Resource to allocate Step.Pick.IDs, fill in
	// Step.Pick.Devices and Step.Pick.Response, and report with Allocated.
	StepAllocate
	// StepWrite: the container's picks are committed in the State; write the checkpoint and
	// report with Written. A failed write is undone by the next call of Next.
	StepWrite
)

// Demand is a container's need of one resource, as the owner reads it from the pod spec.
type Demand struct {
	Resource string
	// Required is the container's limit for the resource.
	Required int
	// Awaitable: an unserved resource may be waited for (a positive limit of an extended
	// resource).
	Awaitable bool
}

// Pick is one resource's reserved devices and, once its plugin has answered, the answer.
type Pick struct {
	Resource string
	IDs      sets.Set[string]
	Devices  checkpoint.DevicesPerNUMA
	Response *pluginapi.ContainerAllocateResponse
}

// Step is the next thing a container's allocation asks of its owner.
type Step struct {
	Kind     StepKind
	Resource string
	// Required and Reusable are StepSelect's: how many devices, and the pod's reuse pool of
	// the resource.
	Required int
	Reusable sets.Set[string]
	// Pick is StepAllocate's.
	Pick *Pick
	// Err is StepDone's.
	Err error
}

// ContainerSteps is the order of steps that allocates one container's devices, in one place
// for devicemanager.Manager and the simulator (package explore): for each resource in name
// order, a wait for a resource no plugin serves, garbage collection before the first
// device-plugin resource, selection (with the plugin's preference), the plugin's Allocate;
// then commit, the checkpoint write, and the pod's init-container reuse pool. A failure at any
// step releases every reservation and records nothing.
//
// It does no I/O: Next says what to do, the owner does it (RPCs, waits, the write) and
// reports the outcome. Next reads and changes the State, so the owner calls it holding
// whatever guards the State; the reports touch only the ContainerSteps, which one goroutine
// owns. A step not yet reported is returned again by Next, so the owner may stop between
// steps and go on later (the simulator's crash and scheduling points). A report that answers
// no pending step is a bug in the owner, and panics.
type ContainerSteps struct {
	podUID, container string
	regularInit       bool
	demands           []Demand
	reuse             map[string]sets.Set[string]

	i         int  // the demand being worked on
	unknownOK bool // StepAwaitUnknown reported for demand i
	served    bool // ... and the resource is served now
	gcDone    bool
	picks     []*Pick
	pending   *Step // issued, not yet reported
	err       error // the failure reported, applied by the next Next
	committed bool  // the picks are in the State, StepWrite issued
	done      *Step
}

// NewContainerSteps starts the allocation of a container of the pod; demands are its
// resources in name order; regularInit says it is an init container that is not a sidecar.
// It takes a copy of the pod's reuse pool, so the caller holds the State's guard.
func (s *State) NewContainerSteps(podUID, container string, regularInit bool, demands []Demand) *ContainerSteps {
	return &ContainerSteps{podUID: podUID, container: container, regularInit: regularInit,
		demands: demands, reuse: s.reusePool(podUID)}
}

// Picks returns the resources the container is getting devices of so far, read-only.
func (c *ContainerSteps) Picks() []*Pick { return c.picks }

// Abandon releases the reservations of an allocation its owner gives up between steps (the
// pod went away); the ContainerSteps is not used again.
func (c *ContainerSteps) Abandon(s *State) {
	if c.committed {
		return // nothing is reserved any more
	}
	for _, p := range c.picks {
		s.release(p.Resource, p.IDs)
	}
	c.picks = nil
}

// String describes where the allocation is, for a simulator's state fingerprint; the picks
// are left to Picks.
func (c *ContainerSteps) String() string {
	pending, done := -1, -1
	if c.pending != nil {
		pending = int(c.pending.Kind)
	}
	if c.done != nil {
		done = int(c.done.Kind)
	}
	reuse := ""
	for _, res := range SortedKeys(c.reuse) {
		reuse += fmt.Sprintf("%s=%v;", res, sets.List(c.reuse[res]))
	}
	return fmt.Sprintf("%s/%s demand=%d unknown=%v served=%v gc=%v pending=%d committed=%v done=%d err=%v reuse=%s",
		c.podUID, c.container, c.i, c.unknownOK, c.served, c.gcDone, pending, c.committed, done, c.err, reuse)
}

// Next returns the next step, applying what was reported to the State: it releases the
// reservations after a failure, commits the picks before the write, undoes the commit after
// a failed write and updates the reuse pool at the end.
func (c *ContainerSteps) Next(s *State) Step {
	if c.done != nil {
		return *c.done
	}
	if c.pending != nil {
		return *c.pending
	}
	if c.err != nil {
		res := c.failedResource()
		if c.committed {
			committed := make([]string, 0, len(c.picks))
			for _, p := range c.picks {
				committed = append(committed, p.Resource)
			}
			s.uncommit(c.podUID, c.container, committed)
		} else {
			for _, p := range c.picks {
				s.release(p.Resource, p.IDs)
			}
		}
		c.picks = nil
		return c.finish(Step{Kind: StepDone, Resource: res, Err: c.err})
	}
	if c.committed {
		s.containerAllocated(c.podUID, c.container, c.regularInit)
		return c.finish(Step{Kind: StepDone})
	}
	if c.i == len(c.demands) {
		if len(c.picks) == 0 {
			s.containerAllocated(c.podUID, c.container, c.regularInit)
			return c.finish(Step{Kind: StepDone})
		}
		for _, p := range c.picks {
			s.Commit(c.podUID, c.container, p.Resource, p.IDs, p.Devices, p.Response)
		}
		c.committed = true
		return c.issue(Step{Kind: StepWrite})
	}
	d := c.demands[c.i]
	plugin := s.IsDevicePluginResource(d.Resource)
	if !plugin && d.Required > 0 && d.Awaitable {
		if !c.unknownOK {
			return c.issue(Step{Kind: StepAwaitUnknown, Resource: d.Resource})
		}
		plugin = c.served
	}
	if !plugin {
		c.nextDemand()
		return Step{Kind: StepPassOver, Resource: d.Resource}
	}
	if !c.gcDone {
		c.gcDone = true
		return Step{Kind: StepCollect, Resource: d.Resource}
	}
	return c.issue(Step{Kind: StepSelect, Resource: d.Resource, Required: d.Required, Reusable: c.reuse[d.Resource]})
}

// Served reports StepAwaitUnknown: whether the resource is served now, or why waiting for it
// failed.
func (c *ContainerSteps) Served(served bool, err error) {
	c.report(StepAwaitUnknown)
	c.unknownOK, c.served, c.err = true, served, err
}

// Selected reports StepSelect: the devices chosen and reserved (none: nothing to allocate),
// or why none could be.
func (c *ContainerSteps) Selected(ids sets.Set[string], err error) {
	s := c.report(StepSelect)
	if err != nil {
		c.err = err
		return
	}
	if ids.Len() == 0 {
		c.nextDemand()
		return
	}
	c.picks = append(c.picks, &Pick{Resource: s.Resource, IDs: ids})
	c.pending = &Step{Kind: StepAllocate, Resource: s.Resource, Pick: c.picks[len(c.picks)-1]}
}

// Allocated reports StepAllocate: nil when the plugin answered and the pick is filled in.
func (c *ContainerSteps) Allocated(err error) {
	c.report(StepAllocate)
	if err != nil {
		c.err = err
		return
	}
	c.nextDemand()
}

// Written reports StepWrite.
func (c *ContainerSteps) Written(err error) {
	c.report(StepWrite)
	c.err = err
}

func (c *ContainerSteps) issue(s Step) Step {
	c.pending = &s
	return s
}

func (c *ContainerSteps) finish(s Step) Step {
	c.done = &s
	return s
}

// report takes the pending step, which must be of the given kind.
func (c *ContainerSteps) report(k StepKind) Step {
	if c.pending == nil || c.pending.Kind != k {
		panic("state: ContainerSteps: a report that does not answer the pending step")
	}
	s := *c.pending
	c.pending = nil
	return s
}

func (c *ContainerSteps) nextDemand() {
	c.i++
	c.unknownOK, c.served = false, false
}

// failedResource is the resource a failure is about: the one being worked on, or, for the
// checkpoint write, the last one picked.
func (c *ContainerSteps) failedResource() string {
	if c.i < len(c.demands) {
		return c.demands[c.i].Resource
	}
	if len(c.picks) > 0 {
		return c.picks[len(c.picks)-1].Resource
	}
	return ""
}

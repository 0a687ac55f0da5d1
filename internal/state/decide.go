package state

import (
	"errors"
	"fmt"
	"time"
)

// Rules are the policy switches the core's decisions read. The device manager and the
// explorer build them from the same policy (devicemanager.Policy.Rules), and each carries out
// what the decisions below return: neither decides these things on its own.
type Rules struct {
	// RejectSameSocketRegistration: a Register for a socket that a connected instance of
	// the resource serves is refused (the kubelet v1.37).
	RejectSameSocketRegistration bool
	// PromoteLiveInstance: when the current instance's stream ends, the newest replaced
	// instance still connected becomes current (the kubelet v1.37).
	PromoteLiveInstance bool
	// DeferAdmission: an admission waits, up to DeferAdmissionTimeout, for a plugin that is
	// not back yet instead of failing (kdm).
	DeferAdmission        bool
	DeferAdmissionTimeout time.Duration
	// GracePeriod is how long a resource whose plugin went away keeps its capacity.
	GracePeriod time.Duration
}

// RegisterDecision is what a Register that passed validation and reached its plugin does.
type RegisterDecision int

const (
	// RegisterReplace: the new instance becomes the resource's current one; the instance it
	// replaces, if any, stays connected (some plugins exit when their stream closes).
	RegisterReplace RegisterDecision = iota
	// RegisterRefuseSameSocket: refused, since a connected instance of the resource serves
	// the same socket; nothing changes and the new connection is closed.
	RegisterRefuseSameSocket
)

// Register decides a Register. connectedOnSocket reports whether a connected instance of the
// resource (current or replaced) serves the socket the request names.
func (r Rules) Register(connectedOnSocket bool) RegisterDecision {
	if r.RejectSameSocketRegistration && connectedOnSocket {
		return RegisterRefuseSameSocket
	}
	return RegisterReplace
}

// DisconnectKind is what the end of one instance's stream does to its resource.
type DisconnectKind int

const (
	// DisconnectForget: a replaced instance's stream ended; it is forgotten and the
	// resource is left as it is.
	DisconnectForget DisconnectKind = iota
	// DisconnectPromote: another connected instance becomes current (Disconnect.Promote).
	DisconnectPromote
	// DisconnectUnhealthy: the resource's devices turn unhealthy and its grace period
	// starts (State.Disconnect).
	DisconnectUnhealthy
)

// Disconnect is the decision for one ended stream.
type Disconnect struct {
	Kind DisconnectKind
	// Promote is, for DisconnectPromote, the index in others of the instance that becomes
	// current.
	Promote int
}

// Disconnect decides what the end of an instance's stream does. current reports whether the
// instance was the resource's current one; others lists, oldest registration first, whether
// each other instance of the resource is still connected; stopping reports that the owner
// itself is shutting down (nothing is promoted then).
func (r Rules) Disconnect(current bool, others []bool, stopping bool) Disconnect {
	if !current {
		return Disconnect{Kind: DisconnectForget}
	}
	if r.PromoteLiveInstance && !stopping {
		for i := len(others) - 1; i >= 0; i-- {
			if others[i] {
				return Disconnect{Kind: DisconnectPromote, Promote: i}
			}
		}
	}
	return Disconnect{Kind: DisconnectUnhealthy}
}

// WatcherRemoval decides whether the removal of a plugins_registry socket stops the instance
// registered through it: under PromoteLiveInstance always, otherwise only while it is current.
func (r Rules) WatcherRemoval(current bool) bool {
	return current || r.PromoteLiveInstance
}

// PodEnd is how a pod stops running: deleted, or its containers completed.
type PodEnd int

const (
	// PodDeleted: the pod is gone from the pod source.
	PodDeleted PodEnd = iota
	// PodCompleted: every container exited; the pod object remains.
	PodCompleted
)

// PodFate is what a pod's end means to the device manager.
type PodFate struct {
	// Active: the pod is still among the pod source's active pods, so garbage collection
	// keeps its devices assigned.
	Active bool
	// Readmit: a restart admits the pod again (its containers are not running, so the
	// admission runs every check).
	Readmit bool
}

// Fate decides what the pod's end means. A completed pod stays in the pod source until it is
// deleted, as the kubelet's does: it keeps its devices, and a restart admits it again
// (kubernetes #117955). A deleted pod is neither.
func Fate(end PodEnd) PodFate {
	if end == PodCompleted {
		return PodFate{Active: true, Readmit: true}
	}
	return PodFate{}
}

// WaitKind is what an admission waiting for a plugin does next.
type WaitKind int

const (
	// WaitRetry: select again now (the plugin is back, or it is not awaited any more).
	WaitRetry WaitKind = iota
	// WaitSleep: wait for a device change or the deadline (Wait.Until), on the caller's
	// clock.
	WaitSleep
	// WaitFail: the wait is over without the plugin; the admission fails with Wait.Err.
	WaitFail
)

// Wait is one decision of a wait: its kind, when to look again, and the error of a failed
// wait.
type Wait struct {
	Kind  WaitKind
	Until time.Time
	Err   error
}

// Deferral is one admission's wait for a resource whose plugin is not back yet
// (Rules.DeferAdmission): started when Select fails with ErrNoHealthyDevices, asked again
// after every device change and at each Wait.Until. The owner runs the wait on its clock.
type Deferral struct {
	rules      Rules
	res        string
	err        error // the refusal that started the wait
	deadline   time.Time
	wasStopped bool
}

// Defer decides whether an admission that Select refused with err waits for the resource's
// plugin: under DeferAdmission, when err is ErrNoHealthyDevices and the plugin is awaited.
// It returns the wait, or nil when err stands.
func (r Rules) Defer(s *State, res string, err error, now time.Time) *Deferral {
	if !r.DeferAdmission || !errors.Is(err, ErrNoHealthyDevices) || !s.AwaitingPlugin(res, now, r.GracePeriod) {
		return nil
	}
	return &Deferral{rules: r, res: res, err: err, deadline: now.Add(r.DeferAdmissionTimeout)}
}

// Timeout is the wait's length, for logs.
func (d *Deferral) Timeout() time.Duration { return d.rules.DeferAdmissionTimeout }

// Next decides the wait's next step at now: fail once the plugin has stayed away past its
// grace period, retry once the plugin is not awaited any more, fail at the deadline, or sleep
// until the deadline or the end of the plugin's grace period (which removes the resource
// without any device change), whichever comes first.
func (d *Deferral) Next(s *State, now time.Time) Wait {
	grace := d.rules.GracePeriod
	left, stopped := s.GraceLeft(d.res, now, grace)
	d.wasStopped = d.wasStopped || stopped
	if d.wasStopped && s.GraceOver(d.res, now, grace) {
		// The plugin stayed away past its grace period: nothing can come of a retry, and the
		// error is the same whether the owner has removed the resource yet or not.
		return Wait{Kind: WaitFail, Err: d.graceErr(d.err)}
	}
	if !s.AwaitingPlugin(d.res, now, grace) {
		return Wait{Kind: WaitRetry}
	}
	if !now.Before(d.deadline) {
		return Wait{Kind: WaitFail, Err: fmt.Errorf("%w (waited %v for the device plugin to register)", d.err, d.rules.DeferAdmissionTimeout)}
	}
	until := d.deadline
	if stopped && now.Add(left).Before(until) {
		until = now.Add(left)
	}
	return Wait{Kind: WaitSleep, Until: until}
}

// Retried returns the error of the selection made after the wait (WaitRetry): err, naming
// the grace period when the plugin was away and its resource is removed now.
func (d *Deferral) Retried(s *State, err error, now time.Time) error {
	if err != nil && d.wasStopped && s.GraceOver(d.res, now, d.rules.GracePeriod) {
		return d.graceErr(err)
	}
	return err
}

func (d *Deferral) graceErr(err error) error {
	return fmt.Errorf("%w (the device plugin did not register again within the %v grace period; the resource is removed)", err, d.rules.GracePeriod)
}

// Cancelled is the error of a wait the owner gave up on (its context ended).
func (d *Deferral) Cancelled(cause error) error {
	return fmt.Errorf("%w (stopped waiting for the device plugin: %w)", d.err, cause)
}

// UnknownWait is the decision for a container asking for a resource no plugin has
// registered (StepAwaitUnknown): wait, or go on and tell ContainerSteps.Served whether the
// resource is served.
type UnknownWait struct {
	Wait   bool
	Until  time.Time
	Served bool
}

// AwaitUnknown decides, under DeferAdmission, whether a container asking for a resource no
// plugin has registered waits for one: while the owner is younger than the deferral timeout
// (startedAt) and the resource is not served. bypass reports a container that was running
// before the restart while the pod sources are not ready: it keeps what it has and never
// waits. Past the window the container goes on unserved (the kubelet admits it without
// devices).
func (r Rules) AwaitUnknown(s *State, res string, startedAt, now time.Time, bypass bool) UnknownWait {
	if !r.DeferAdmission || bypass {
		return UnknownWait{}
	}
	if s.IsDevicePluginResource(res) && !s.AwaitingPlugin(res, now, r.GracePeriod) {
		return UnknownWait{Served: true}
	}
	deadline := startedAt.Add(r.DeferAdmissionTimeout)
	if !now.Before(deadline) {
		return UnknownWait{}
	}
	return UnknownWait{Wait: true, Until: deadline}
}

// String describes the wait (resource, deadline, whether the plugin was seen away), for
// fingerprints and logs; nil is "none".
func (d *Deferral) String() string {
	if d == nil {
		return "none"
	}
	return fmt.Sprintf("%s until=%d stopped=%v", d.res, d.deadline.UnixNano(), d.wasStopped)
}

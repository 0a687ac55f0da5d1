package scenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
)

// settle bounds every wait for the real manager and plugins to reach a state.
const settle = 20 * time.Second

// Runner drives one real device manager and real plugins over unix sockets in a temporary
// directory, with a fake clock, through a scenario's commands. It is not safe for concurrent
// use; admissions it starts run in their own goroutines and are reported as they finish.
type Runner struct {
	scriptDir  string // Config.ScriptDir
	records    bool   // Config.Records
	policy     devicemanager.Policy
	quarantine bool // Config.QuarantineCorruptCheckpoint: off under the kubelet's policy
	dir        string
	clock      *clocktesting.FakeClock
	start      time.Time
	m          *devicemanager.Manager
	ready      bool // sources ready
	plugins    map[string]*plugin
	pods       map[string]*pod
	order      []string // pod names in admission order
	log        logr.Logger

	mu       sync.Mutex
	events   []string // admission outcomes not yet printed
	deferred chan string
	inflight sync.WaitGroup
	// admitCtx bounds the admissions of the current manager: a restart or Close cancels it,
	// and an admission of an earlier generation (gen) leaves the runner's state alone.
	admitCtx    context.Context
	cancelAdmit context.CancelFunc
	gen         int
	// settled is closed and replaced, under mu, whenever an admission in flight ends.
	settled chan struct{}
}

// plugin is a device plugin the script names: its devices and the instances of it that run.
type plugin struct {
	name    string
	devices []*pluginapi.Device
	// running are the plugin's running instances, oldest first: one, or more while
	// `plugin add-instance` started another beside it. Empty while the plugin is down.
	running []instance
	serial  int // instances started so far; the next one listens on NAME-<serial+1>.sock
}

// instance is one running plugin process and the socket file (in the plugin directory) it
// serves and registers.
type instance struct {
	inst   *plugintest.Plugin
	socket string
}

// newest returns the plugin's most recently started running instance, or nil.
func (p *plugin) newest() *instance {
	if len(p.running) == 0 {
		return nil
	}
	return &p.running[len(p.running)-1]
}

// stopAll stops every running instance of the plugin, in no particular order (the manager is
// down, or going).
func (p *plugin) stopAll() {
	for _, in := range p.running {
		in.inst.Stop()
	}
	p.running = nil
}

// stopInOrder stops every running instance of the plugin that serves res. The manager sees the
// streams end in the order the simulator (package explore) takes them, all at once: every
// stream but the served one first (the other instances', and the older connections of the
// served instance that `plugin register-again` leaves open), then the served one. Otherwise
// which end the manager handled first would decide whether a replaced instance took over for
// a moment (Policy.PromoteLiveInstance), an order nobody chooses.
func (r *Runner) stopInOrder(p *plugin, res string) error {
	served, _ := r.endpointOf(res)
	var last *instance
	for i := range p.running {
		in := p.running[i]
		if in.socket == served {
			last = &in
			continue
		}
		in.inst.DropStreams()
		in.inst.Stop()
	}
	p.running = nil
	if last == nil {
		return nil
	}
	last.inst.DropOlderStreams()
	err := r.waitReplacedStreamsClosed(res, 0)
	last.inst.Stop()
	return err
}

type pod struct {
	obj       *v1.Pod
	state     string // admitting, admitted, rejected, waiting, deleted
	running   bool   // its app containers and sidecars run
	completed bool   // its containers exited (state.Fate: it stays, and is admitted again at a restart)
	reason    string // why it was rejected
	// records is the embedder's copy of the pod's assignments, taken when it was admitted
	// (Config.Records).
	records []checkpoint.PodDevicesEntry
	// cancel ends the admission in flight, when the pod is deleted. Guarded by mu.
	cancel context.CancelFunc
}

// New prepares a runner: it validates cfg and creates the runner's temporary directory, which
// Close removes. It fails with cfg.Validate's error if cfg is invalid.
func New(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pol, err := cfg.policy()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log.GetSink() == nil {
		// Not logr.Discard(): its nil sink would make the manager fall back to klog.
		log = funcr.New(func(string, string) {}, funcr.Options{})
	}
	r := &Runner{scriptDir: cfg.ScriptDir, records: cfg.Records, plugins: map[string]*plugin{}, pods: map[string]*pod{},
		log: log, deferred: make(chan string, 64), settled: make(chan struct{})}
	r.quarantine = !pol.IsKubelet()
	r.policy = pol
	r.policy.CoalesceDeviceListWrites = false // keep the file in step with every command
	dir, err := os.MkdirTemp("", "kdm-sc")
	if err != nil {
		return nil, fmt.Errorf("scenario: creating the runner's directory: %w", err)
	}
	r.dir = dir
	r.start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.clock = clocktesting.NewFakeClock(r.start)
	return r, nil
}

// Close stops everything and removes the runner's directory.
func (r *Runner) Close() {
	for _, p := range r.plugins {
		p.stopAll()
	}
	if r.m != nil {
		_ = r.m.Stop()
	}
	r.endAdmissions()
	r.inflight.Wait()
	_ = os.RemoveAll(r.dir)
}

func (r *Runner) resource(name string) string { return "example.com/" + name }

// endAdmissions cancels the admissions of the current manager (at a restart, and at Close):
// what they were waiting for will not come from this manager.
func (r *Runner) endAdmissions() {
	r.mu.Lock()
	r.gen++
	cancel := r.cancelAdmit
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// startManager starts a manager on the runner's directory. running lists the containers the
// "runtime" reports running.
func (r *Runner) startManager(running []devicemanager.ContainerKey) error {
	quarantine := r.quarantine
	m, err := devicemanager.New(devicemanager.Config{
		PluginDir: r.dir, Clock: r.clock, Logger: r.log, Policy: r.policy, QuarantineCorruptCheckpoint: &quarantine,
		OnAdmissionDeferred: func(podUID, _, _ string) {
			select {
			case r.deferred <- podUID:
			default:
			}
		},
	})
	if err != nil {
		return err
	}
	var records []checkpoint.PodDevicesEntry
	r.mu.Lock()
	for _, name := range r.order {
		if p := r.pods[name]; p.state != "deleted" && p.state != "rejected" {
			records = append(records, p.records...)
		}
	}
	r.mu.Unlock()
	if err := m.Start(context.Background(), devicemanager.Sources{
		ActivePods:           r.activePods,
		SourcesReady:         func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.ready },
		RunningContainers:    running,
		RecoveredAllocations: records,
	}); err != nil {
		return err
	}
	r.m = m
	r.mu.Lock()
	r.admitCtx, r.cancelAdmit = context.WithCancel(context.Background())
	r.mu.Unlock()
	return nil
}

func (r *Runner) activePods() []*v1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*v1.Pod
	for _, p := range r.pods {
		if p.state != "deleted" && p.state != "rejected" {
			out = append(out, p.obj)
		}
	}
	return out
}

// startPlugin starts a new instance of the named plugin on a socket of its own, adds it to the
// plugin's running instances and waits until the manager lists its devices.
func (r *Runner) startPlugin(p *plugin) error {
	p.serial++
	socket := fmt.Sprintf("%s-%d.sock", p.name, p.serial)
	inst, err := plugintest.New(deviceplugin.Config{
		ResourceName: r.resource(p.name), PluginDir: r.dir, SocketName: socket,
		Options: &pluginapi.DevicePluginOptions{}, Devices: p.devices, Logger: r.log, KeepRegistering: true,
	}, plugintest.RecordRequests()) // `pod admit ... crash=allocate` waits for an Allocate call
	if err != nil {
		return err
	}
	if err := inst.Start(context.Background()); err != nil {
		return err
	}
	p.running = append(p.running, instance{inst: inst, socket: socket})
	healthy := int64(0)
	for _, d := range p.devices {
		if d.Health == pluginapi.Healthy {
			healthy++
		}
	}
	// Capacity survives a plugin's exit, so wait for the new instance's healthy devices, and
	// then for the new instance to serve the resource with its list applied: the counts
	// alone may be those of an instance that runs already.
	res := r.resource(p.name)
	if err := r.waitCapacity(res, func(c, a int64) bool { return c == int64(len(p.devices)) && a == healthy }); err != nil {
		return err
	}
	return r.waitEndpoint(res, socket+" serving", func(s string, _ int) bool { return s == socket })
}

// waitCapacity waits, on the manager's device-change broadcast, until cond holds for the
// resource.
func (r *Runner) waitCapacity(res string, cond func(capacity, allocatable int64) bool) error {
	timer := time.NewTimer(settle)
	defer timer.Stop()
	for {
		changed := r.m.DeviceChanges() // taken before reading, so no change is missed
		c, a := r.counts(res)
		if cond(c, a) {
			r.m.WaitForCheckpointWrites() // the file matches what is visible
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return fmt.Errorf("%s did not settle: capacity %d allocatable %d", res, c, a)
		}
	}
}

// waitReplacedStreamsClosed waits, on the device-change broadcast, until the manager has seen
// the streams of every replaced instance of res end but those of the instances still running
// (keep: the plugin's running instances other than the newest).
func (r *Runner) waitReplacedStreamsClosed(res string, keep int) error {
	timer := time.NewTimer(settle)
	defer timer.Stop()
	for {
		changed := r.m.DeviceChanges()
		open := 0
		for _, v := range r.m.Resources() {
			if v.Name == res {
				open = v.ReplacedStreams
			}
		}
		if open <= keep {
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return fmt.Errorf("%s: %d replaced instance stream(s) still open", res, open)
		}
	}
}

// endpointOf returns the manager's view of the resource: the instance it serves (socket file
// name, empty when none runs) and how many replaced instances' streams are open.
func (r *Runner) endpointOf(res string) (socket string, replaced int) {
	for _, v := range r.m.Resources() {
		if v.Name == res {
			if v.Endpoint.State == devicemanager.EndpointRunning {
				socket = filepath.Base(v.Endpoint.Socket)
			}
			return socket, v.ReplacedStreams
		}
	}
	return "", 0
}

// waitEndpoint waits, on the device-change broadcast, until cond holds for the resource's
// endpoint (endpointOf) and the instance it serves, if any, has sent its first list.
func (r *Runner) waitEndpoint(res, what string, cond func(socket string, replaced int) bool) error {
	timer := time.NewTimer(settle)
	defer timer.Stop()
	for {
		changed := r.m.DeviceChanges()
		socket, replaced := r.endpointOf(res)
		listed := socket == ""
		for _, v := range r.m.Resources() {
			if v.Name == res && socket != "" {
				listed = v.Endpoint.Listed
			}
		}
		if cond(socket, replaced) && listed {
			r.m.WaitForCheckpointWrites()
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return fmt.Errorf("%s: %s did not happen: serving %q, %d replaced instance stream(s) open", res, what, socket, replaced)
		}
	}
}

func (r *Runner) counts(res string) (int64, int64) {
	c, a, _ := r.m.GetCapacity()
	cq, ok := c[v1.ResourceName(res)]
	if !ok {
		return -1, -1
	}
	aq := a[v1.ResourceName(res)]
	return cq.Value(), aq.Value()
}

// parsePod builds a pod from "init=gpu:1 sidecar=nic:1 app=gpu:2" or the short "gpu=2"
// (ParsePodSpec).
func (r *Runner) parsePod(name string, args []string) (*v1.Pod, error) {
	specs, err := ParsePodSpec(args)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)}}
	always := v1.ContainerRestartPolicyAlways
	for _, cs := range specs {
		c := v1.Container{Name: cs.Name, Resources: v1.ResourceRequirements{Limits: v1.ResourceList{
			v1.ResourceName(r.resource(cs.Resource)): *resource.NewQuantity(int64(cs.Count), resource.DecimalSI)}}}
		switch cs.Kind {
		case AppContainer:
			p.Spec.Containers = append(p.Spec.Containers, c)
		case SidecarContainer:
			c.RestartPolicy = &always
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		default:
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		}
	}
	return p, nil
}

// admit runs the pod's admission (init containers first) in a goroutine and waits until it
// finishes or starts waiting for a plugin.
func (r *Runner) admit(name string) {
	p := r.pods[name]
	for drained := false; !drained; { // notices from earlier admissions are stale
		select {
		case <-r.deferred:
		default:
			drained = true
		}
	}
	r.mu.Lock()
	p.state = "admitting"
	ctx, cancel := context.WithCancel(r.admitCtx)
	p.cancel = cancel
	gen := r.gen
	r.mu.Unlock()
	done := make(chan struct{})
	r.inflight.Add(1)
	go func() {
		defer r.inflight.Done()
		defer close(done)
		defer cancel()
		var err error
		for _, c := range allContainers(p.obj) {
			if err = r.m.Allocate(ctx, p.obj, c); err != nil {
				break
			}
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if gen != r.gen || p.state == "deleted" {
			return // its manager was stopped (the next one admits it again), or the pod is gone
		}
		defer func() { // wake inflightSettle
			close(r.settled)
			r.settled = make(chan struct{})
		}()
		waited := p.state == "waiting"
		if err != nil {
			p.state, p.running = "rejected", false
			p.reason = fmt.Sprintf("UnexpectedAdmissionError: Allocate failed due to %v, which is unexpected", err)
			r.events = append(r.events, name+" rejected: "+p.reason)
			return
		}
		p.state, p.running, p.reason = "admitted", !p.completed, ""
		if r.records {
			p.records = nil
			for _, c := range allContainers(p.obj) {
				p.records = append(p.records, r.m.GetContainerAllocations(string(p.obj.UID), c.Name)...)
			}
		}
		if waited {
			r.events = append(r.events, name+" admitted after waiting for its device plugin")
		} else {
			r.events = append(r.events, name+" admitted")
		}
	}()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			// Its manager is stopping (a restart, which admits the pod again) or the pod was
			// deleted: a deferral notice from now on is the next admission's.
			return
		case uid := <-r.deferred:
			if uid == string(p.obj.UID) {
				r.mu.Lock()
				if p.state == "admitting" { // not finished meanwhile
					p.state = "waiting"
					r.events = append(r.events, name+" waiting for its device plugin (deferred admission)")
				}
				r.mu.Unlock()
				return
			}
		case <-time.After(settle):
			r.mu.Lock()
			r.events = append(r.events, name+" admission still running after "+settle.String())
			r.mu.Unlock()
			return
		}
	}
}

// drain returns the admission outcomes since the last call.
func (r *Runner) drain() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

func allContainers(p *v1.Pod) []*v1.Container {
	var out []*v1.Container
	for i := range p.Spec.InitContainers {
		out = append(out, &p.Spec.InitContainers[i])
	}
	for i := range p.Spec.Containers {
		out = append(out, &p.Spec.Containers[i])
	}
	return out
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func v1Name(s string) v1.ResourceName { return v1.ResourceName(s) }

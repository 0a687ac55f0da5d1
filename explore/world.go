package explore

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
	icheckpoint "github.com/kdm-project/kdm/internal/checkpoint"
	"github.com/kdm-project/kdm/internal/state"
)

// domain is how the scenario language names resources: plugin "gpu" serves example.com/gpu.
const domain = "example.com/"

// origin is the simulated clock's start.
var origin = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type podPhase int

const (
	podPending  podPhase = iota // in the pod source, not (yet) admitted by this manager
	podWaiting                  // its admission waits for a device plugin (deferred)
	podAdmitted                 // admitted; its containers run unless completed or rebooted
	podRejected
	podDeleted
)

func (p podPhase) String() string {
	return [...]string{"pending", "waiting", "admitted", "rejected", "deleted"}[p]
}

// simContainer is one container of a simulated pod, with its device requests.
type simContainer struct {
	name        string
	regularInit bool
	requests    map[string]int // resource → count
}

// simPod is a pod of the simulated pod source.
type simPod struct {
	name, uid  string
	spec       []string // the scenario arguments that built it
	containers []simContainer
	phase      podPhase
	running    bool
	// completed: its containers exited. What that means (state.Fate): the pod stays in the
	// pod source with its devices, and a restart admits it again; it never runs again.
	completed bool
	// admittedGen is the manager generation that last admitted the pod (0: never).
	admittedGen int
	// given records, per container and resource, the devices and the plugin's answer the
	// container started with.
	given map[string]map[string]grant
	// records is the embedder's durable copy of the pod's assignments (the agent's pod
	// results), written once the pod is admitted.
	records []checkpoint.PodDevicesEntry
	reason  string
}

// grant is what a container received of one resource.
type grant struct {
	ids  string // sorted, comma-separated
	resp string // fingerprint of the plugin's Allocate answer
}

// heldOf returns the devices of the resource the pod's containers started with.
func (p *simPod) heldOf(res string) sets.Set[string] {
	out := sets.New[string]()
	for _, g := range p.given {
		if gr, ok := g[res]; ok && gr.ids != "" {
			out.Insert(strings.Split(gr.ids, ",")...)
		}
	}
	return out
}

// active reports whether the pod is among the pod source's active pods: neither deleted nor
// rejected (a completed pod stays, state.Fate).
func (p *simPod) active() bool {
	return p.phase != podDeleted && p.phase != podRejected
}

// live reports whether the pod is active and its containers have not completed.
func (p *simPod) live() bool { return p.active() && !p.completed }

// simPlugin is a simulated device plugin process.
type simPlugin struct {
	name     string
	devices  []*pluginapi.Device
	alive    bool
	instance int // the newest registration; registrations only grow
	// open are the registrations whose streams are open (a process of the plugin serves
	// them), oldest first: one, more while a rolling update runs or after a second
	// Register on one socket. A manager restart closes them all.
	open []conn
	// sockets counts the sockets the plugin's processes have listened on, as the scenario
	// runner names them: the n-th is NAME-n.sock.
	sockets int
	faults  Faults
	listed  bool // the current registration sent a (non-empty-first) list
	version int  // counts the changes of the plugin's device list
	added   int  // devices added so far, for fresh IDs
}

// Faults are plugin misbehaviours the explorer injects.
type Faults struct {
	FailAllocate        bool // Allocate returns an error
	FailPreferred       bool // GetPreferredAllocation returns an error
	NeverReregister     bool // does not watch kubelet.sock: stays unregistered after a manager restart
	EmptyFirstList      bool // the first ListAndWatch response of each registration is empty
	PreferredAvailable  bool // offers GetPreferredAllocation
	ExitOnStreamClosing bool // exits when the manager closes its stream (some vendors' plugins)
}

func (f Faults) String() string {
	var out []string
	for _, x := range []struct {
		on   bool
		name string
	}{{f.FailAllocate, "fail-allocate"}, {f.FailPreferred, "fail-preferred"}, {f.NeverReregister, "never-reregister"},
		{f.EmptyFirstList, "empty-first-list"}, {f.PreferredAvailable, "preferred"}, {f.ExitOnStreamClosing, "exit-on-stream-close"}} {
		if x.on {
			out = append(out, x.name)
		}
	}
	return strings.Join(out, ",")
}

// conn is one registration of a plugin and the socket it was made for.
type conn struct {
	instance int
	socket   int // NAME-<socket>.sock
	// replacedAt is the plugin's list version when another registration became current:
	// the manager keeps a list a replaced instance sends afterwards for its promotion.
	replacedAt int
}

func (p *simPlugin) resource() string { return domain + p.name }

// newestSocket is the socket of the newest open registration, 0 when none is open.
func (p *simPlugin) newestSocket() int {
	if len(p.open) == 0 {
		return 0
	}
	return p.open[len(p.open)-1].socket
}

// isOpen reports whether the registration's stream is open.
func (p *simPlugin) isOpen(instance int) bool {
	return instance != 0 && slices.ContainsFunc(p.open, func(c conn) bool { return c.instance == instance })
}

// list returns the plugin's current device list, as the plugin sends it.
func (p *simPlugin) list() []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(p.devices))
	for i, d := range p.devices {
		out[i] = &pluginapi.Device{ID: d.ID, Health: d.Health}
	}
	return out
}

// world is the simulated node: the manager, its disk, the plugins, the pods and the clock.
type world struct {
	policy  devicemanager.Policy
	rules   state.Rules // the policy's switches, as the core's decisions read them
	records bool        // the embedder keeps its own records (Sources.RecoveredAllocations)
	// quarantine: a corrupt checkpoint is moved aside at start (Config.QuarantineCorruptCheckpoint,
	// off where a kubelet's policy is replayed).
	quarantine bool
	now        time.Time
	gen        int // manager generation: increments at each (re)start
	st         *state.State
	// current is, per resource, the plugin instance the manager serves; 0 for none.
	current      map[string]int
	startedAt    time.Time
	sourcesReady bool

	disk         []byte                // the durable checkpoint file; nil when absent
	written      *icheckpoint.Prepared // the last write, not encoded yet: the file's content when set
	diskTampered bool                  // an event damaged the file on purpose; checked again after the next write
	writes       int

	plugins map[string]*simPlugin
	pods    map[string]*simPod
	order   []string // pod names in arrival order

	admissions []*admission // in flight, in start order
	tasks      []task       // pending work other than admissions (plugin re-registrations, lists)
	// restarts records, per generation, when the manager started (for the rejection rule).
	restarts map[int]time.Time
	// rejections of pods admitted by an earlier generation, waiting to see whether their
	// plugin comes back within the deferral window.
	rejections []rejection
	// rebooted: the current generation started after a node reboot.
	rebooted bool
	// late is a violation found inside a step (a re-admission that changed a running
	// container's devices), reported by the next check.
	late *Violation
	// needless is a rejection made while the resource's connected plugin listed enough free
	// healthy devices (NoNeedlessRejection), reported by the next check.
	needless *Violation
	// notes are the human-readable lines of what the last step did.
	notes []string
	// choose, when set, picks which of n pending steps drain runs next (the lockstep check
	// tries the orders in which the manager's concurrent admissions may run).
	choose func(n int) int
}

type rejection struct {
	pod, container, resource, reason string
	regularInit, completed           bool
	restart                          time.Time
	reboot                           bool
}

func newWorld(policy devicemanager.Policy, records bool) *world {
	quarantine := !policy.IsKubelet()
	if policy.DeferAdmissionTimeout == 0 {
		policy.DeferAdmissionTimeout = devicemanager.DefaultDeferAdmissionTimeout
	}
	w := &world{policy: policy, quarantine: quarantine, rules: policy.Rules(gracePeriod), records: records, now: origin, plugins: map[string]*simPlugin{},
		pods: map[string]*simPod{}, restarts: map[int]time.Time{}}
	w.startManager(nil)
	w.sourcesReady = true
	return w
}

func (w *world) note(format string, args ...any) {
	w.notes = append(w.notes, fmt.Sprintf(format, args...))
}

// deferralWindow is how long after a restart a plugin may come back and still find the pods
// it served admitted: the kdm policy's deferral timeout, used as the promise for both
// policies.
func (w *world) deferralWindow() time.Duration { return w.policy.DeferAdmissionTimeout }

// startManager starts a new manager generation from the disk, as Start does: the checkpoint,
// or when it is missing or unusable the embedder's records; running are the containers the
// runtime reports running.
func (w *world) startManager(running []state.ContainerKey) {
	w.gen++
	w.restarts[w.gen] = w.now
	w.st = state.New(state.Options{KeepCompletedInitDevices: w.policy.KeepCompletedInitDevices,
		KnowAssignedResources: w.policy.DeferAdmission})
	w.current = map[string]int{}
	w.startedAt = w.now
	w.admissions = nil
	w.tasks = nil
	w.st.SetRunning(running)
	var data *checkpoint.Data
	usable := false
	if b := w.file(); b != nil {
		d, layout, err := checkpoint.Decode(b)
		switch {
		case err == nil && (layout == checkpoint.LayoutV2 || w.policy.ReadLegacyCheckpoint):
			data, usable = d, true
		case err != nil && w.quarantine:
			// kdm's manager moves a corrupt file aside (Config.QuarantineCorruptCheckpoint,
			// on wherever the kubelet's policy is not replayed).
			w.disk = nil
		}
	}
	if usable {
		w.st.Restore(data, nil, w.now)
		return
	}
	if !w.records {
		return
	}
	var recs []checkpoint.PodDevicesEntry
	for _, name := range w.order {
		if p := w.pods[name]; p.active() {
			recs = append(recs, p.records...)
		}
	}
	if len(recs) == 0 {
		return
	}
	if legacy.dropConflicts {
		recs, _ = state.DropConflictingEntries(recs)
	}
	w.st.Recover(recs, w.now)
	w.writeCheckpoint()
}

// writeCheckpoint is a durable write of the current state (temp file, fsync, rename,
// directory fsync): a crash leaves the old file or the new one, never a torn one.
func (w *world) writeCheckpoint() {
	w.written, w.diskTampered = w.st.Prepared(), false
	w.writes++
}

// file returns the checkpoint file's bytes, nil when there is none. A write is encoded only
// when its bytes are needed (a restart reads them, an event damages them).
func (w *world) file() []byte {
	if w.written != nil {
		b, err := checkpoint.Encode(w.written.Data())
		if err != nil {
			w.note("checkpoint encoding failed: %v", err)
			b = w.disk
		}
		w.disk, w.written = b, nil
	}
	return w.disk
}

// setFile replaces the checkpoint file's bytes (nil: removes it), as an event that damages
// it does: the invariant checks the file again after the next write.
func (w *world) setFile(b []byte) {
	w.disk, w.written, w.diskTampered = b, nil, true
}

// activePods are the UIDs the pod source reports active: neither terminated nor removed.
func (w *world) activePods() sets.Set[string] {
	out := sets.New[string]()
	for _, p := range w.pods {
		if p.active() {
			out.Insert(p.uid)
		}
	}
	return out
}

// gc is UpdateAllocatedDevices: once sources are ready, drop inactive pods and write.
func (w *world) gc() {
	if !w.sourcesReady {
		return
	}
	if removed := w.st.RemoveInactive(w.activePods()); len(removed) > 0 {
		w.writeCheckpoint()
	}
}

// connect makes a new registration of the plugin, for the given socket, current and delivers
// its first list. The registrations already open stay open.
func (w *world) connect(p *simPlugin, socket int) {
	for i := range p.open {
		if p.open[i].instance == w.current[p.resource()] {
			p.open[i].replacedAt = p.version
		}
	}
	p.instance++
	p.open = append(p.open, conn{instance: p.instance, socket: socket})
	w.current[p.resource()] = p.instance
	w.st.Connect(p.resource())
	p.listed = false
	if p.faults.EmptyFirstList {
		w.st.ApplyDeviceList(p.resource(), nil)
		w.writeCheckpoint()
		w.tasks = append(w.tasks, task{kind: taskList, plugin: p.name, instance: p.instance})
	} else {
		w.sendList(p)
	}
}

// newSocket is a new process of the plugin listening on a socket of its own: its number.
func (p *simPlugin) newSocket() int {
	p.sockets++
	return p.sockets
}

// sendList delivers the plugin's current list if one of its open registrations is the
// resource's current one (every process of the plugin lists the same devices), and writes
// the checkpoint, as the manager does after every list.
func (w *world) sendList(p *simPlugin) {
	if !p.alive || !p.isOpen(w.current[p.resource()]) {
		return
	}
	w.st.ApplyDeviceList(p.resource(), p.list())
	p.listed = true
	w.writeCheckpoint() // as the manager writes after every list
}

// closeSocket ends the streams of the plugin's registrations on socket (0: every socket),
// as the process serving it exits. If the current registration was among them, the core's
// Disconnect decision says what follows: another registration still open becomes current and
// the plugin's list applies, or the resource disconnects. With no registration left
// open, the plugin is down.
func (w *world) closeSocket(p *simPlugin, socket int) {
	res := p.resource()
	wasCurrent := p.isOpen(w.current[res])
	p.open = slices.DeleteFunc(p.open, func(c conn) bool { return socket == 0 || c.socket == socket })
	if wasCurrent && !p.isOpen(w.current[res]) {
		// Every instance still open is connected: the core decides between them.
		others := make([]bool, len(p.open))
		for i := range others {
			others[i] = true
		}
		switch d := w.rules.Disconnect(true, others, false); d.Kind {
		case state.DisconnectPromote:
			c := p.open[d.Promote]
			w.current[res] = c.instance
			// The manager applies the last list the promoted instance sent while replaced,
			// if it sent one: every instance lists each change of the devices.
			if p.listed && p.version > c.replacedAt {
				w.sendList(p)
			}
		case state.DisconnectUnhealthy:
			w.st.Disconnect(res, w.now)
			w.current[res] = 0
		}
	}
	if len(p.open) == 0 {
		p.alive, p.listed = false, false
		w.removeTasks(p.name)
	}
}

// busy reports whether an admission holds reservations or is between its plugin's answer
// and its commit.
func (w *world) busy() bool {
	for _, a := range w.admissions {
		if len(a.picks()) > 0 {
			return true
		}
	}
	return false
}

func (w *world) podByUID(uid string) *simPod {
	for _, p := range w.pods {
		if p.uid == uid {
			return p
		}
	}
	return nil
}

func sortedIDs(s sets.Set[string]) string { return strings.Join(sets.List(s), ",") }

// respFingerprint is what the explorer compares of an Allocate answer.
func respFingerprint(r *pluginapi.ContainerAllocateResponse) string {
	if r == nil {
		return "<nil>"
	}
	keys := make([]string, 0, len(r.Envs))
	for k := range r.Envs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s;", k, r.Envs[k])
	}
	return b.String()
}

package conformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/endpoint"
)

// check is one entry of the check list.
type check struct {
	id      int
	name    string
	title   string
	kubelet string
	run     func(*runner) (Status, []string)
}

// Checks lists the checks' IDs, names and titles in ID order, for documentation and --help.
func Checks() []Result {
	var out []Result
	for _, c := range checkOrder() {
		out = append(out, Result{ID: c.id, Name: c.name, Title: c.title, Kubelet: c.kubelet})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// checkOrder is the execution order: the checks that need the first plugin process come
// first, the ones that restart the manager or the plugin later, and the duplicate analysis,
// which reads every registration of the run, last.
func checkOrder() []check {
	return []check{
		{1, "registration", "registers within 5s of start with a valid version, resource name and endpoint inside the directory; Register options equal GetDevicePluginOptions",
			"the kubelet's Register (plugin/v1beta1 server) accepts only version v1beta1 and an extended resource name, joins the endpoint to the socket directory, dials it and reads the options from GetDevicePluginOptions, ignoring those in the request",
			(*runner).checkRegistration},
		{2, "list-and-watch", "the first ListAndWatch list arrives within 5s; device IDs unique; health values and NUMA node IDs plausible",
			"the kubelet's genericDeviceUpdateCallback replaces the resource's device sets with each list, keyed by ID; deviceNUMANodes feeds topology hints and ignores nodes the machine does not have",
			(*runner).checkListAndWatch},
		{3, "allocate", "Allocate for one device and for all devices answers one response per container request with absolute, well-formed paths; GetPreferredAllocation honours must-include and size; PreStartContainer succeeds when required",
			"the kubelet's allocateContainerResources sends one container request per Allocate and fails admission without a container response; callGetPreferredAllocationIfAvailable reads only the first container's IDs; PreStartContainer runs on every container start when PreStartRequired",
			(*runner).checkAllocate},
		{6, "stream-close", "when the manager closes the ListAndWatch stream, the plugin keeps serving or re-registers, and does not exit",
			"the kubelet's client Disconnect closes the plugin connection when a stream ends or at Stop, and a replaced registration's stream is closed when it ends; a plugin must survive its stream being closed",
			(*runner).checkStreamClose},
		{4, "manager-restart", "after a manager restart (its socket removed and created again) the plugin re-registers within 5s (WARN up to 15s) with the same device IDs",
			"the kubelet's device manager Start removes every socket in the directory (CleanupPluginDirectory) and creates kubelet.sock afresh; plugins must detect this and call Register again",
			(*runner).checkManagerRestart},
		{8, "idle-cpu", "idle CPU after a manager restart stays below 5% of one core over 10s",
			"the kubelet only re-creates kubelet.sock on restart; a plugin whose watcher breaks then must not busy-loop",
			(*runner).checkIdleCPU},
		{10, "health", "a health change (--health-trigger / --health-restore) reaches the manager within 5s",
			"the kubelet's genericDeviceUpdateCallback moves devices between healthy and unhealthy only when ListAndWatch sends a new list",
			(*runner).checkHealth},
		{5, "manager-absent-at-start", "with the manager absent at start and appearing 3s later, the plugin registers within 5s of it without exiting (WARN if only a restart saves it)",
			"the kubelet's kubelet.sock may appear after the plugin starts (node boot, kubelet restart); the plugin must wait for it rather than exit",
			(*runner).checkManagerAbsent},
		{9, "sigterm", "on SIGTERM the plugin removes its socket and exits within 5s",
			"the kubelet's CleanupPluginDirectory removes stale sockets only at its own start; a socket left behind is dialled in vain by anyone reading the directory",
			(*runner).checkSigterm},
		{7, "duplicate-registration", "no duplicate Register calls in a row (WARN)",
			"the kubelet's connectClient overwrites the client of a re-registered resource and leaves the old stream open; when that old stream ends, runClient disconnects the new client, marking the resource's devices unhealthy",
			(*runner).checkDuplicates},
	}
}

// ---- 1 ----

func (r *runner) checkRegistration() (Status, []string) {
	start := time.Now()
	snap, ok := r.reg.waitFor(r.ctx, r.t.Register, func(s []regView) bool { return len(s) > 0 })
	if !ok {
		ev := []string{fmt.Sprintf("no Register call within %v of start", r.t.Register)}
		if !r.proc.alive() {
			ev = append(ev, "the plugin exited: "+r.proc.exitStatus())
		}
		return Fail, ev
	}
	v := snap[0]
	ev := []string{fmt.Sprintf("Register after %s: version %q, resource %q, endpoint %q", sinceStr(start, v.at),
		v.req.Version, v.req.ResourceName, v.req.Endpoint)}
	if !v.accepted() {
		ev[0] = "Register refused: " + v.err.Error()
		ev = append(ev, fmt.Sprintf("request: version %q, resource %q, endpoint %q", v.req.Version, v.req.ResourceName, v.req.Endpoint))
		if acc := acceptedFrom(snap, 0); acc >= 0 {
			r.first = acc
			ev = append(ev, fmt.Sprintf("a later Register (#%d) was accepted; later checks use it", acc+1))
		}
		return Fail, ev
	}
	r.first = 0
	reqOpts := v.req.GetOptions()
	if reqOpts == nil {
		reqOpts = &pluginapi.DevicePluginOptions{}
	}
	ev = append(ev, "GetDevicePluginOptions: "+optsString(v.opts))
	if !proto.Equal(reqOpts, v.opts) {
		return Warn, append(ev, fmt.Sprintf("Register options differ: %s; the kubelet uses only GetDevicePluginOptions, so the Register options mislead other readers",
			optsString(reqOpts)))
	}
	return Pass, ev
}

func optsString(o *pluginapi.DevicePluginOptions) string {
	return fmt.Sprintf("preStartRequired=%t getPreferredAllocationAvailable=%t",
		o.GetPreStartRequired(), o.GetGetPreferredAllocationAvailable())
}

// ---- 2 ----

func (r *runner) checkListAndWatch() (Status, []string) {
	if r.first < 0 {
		return Skip, []string{"no accepted registration (check 1)"}
	}
	v, ok := r.waitLists(r.first, 1, time.Until(r.reg.snapshot()[r.first].at.Add(r.t.FirstList)))
	if !ok {
		return Fail, []string{fmt.Sprintf("no ListAndWatch list within %v of registration", r.t.FirstList)}
	}
	l := v.lists[0]
	ev := []string{fmt.Sprintf("first list after %s: %d devices", sinceStr(v.at, l.at), len(l.devices))}
	st, problems := validateDevices(l.devices, hostNUMANodes())
	return st, append(ev, problems...)
}

// validateDevices checks one device list: non-empty unique IDs, known health values, NUMA node
// IDs that are non-negative and (WARN) known to this machine when numa is non-nil.
func validateDevices(devs []*pluginapi.Device, numa sets.Set[int64]) (Status, []string) {
	st := Pass
	var ev []string
	seen := sets.New[string]()
	for _, d := range devs {
		switch {
		case d.ID == "":
			st, ev = Fail, append(ev, "a device has an empty ID")
		case seen.Has(d.ID):
			st, ev = Fail, append(ev, fmt.Sprintf("device ID %q is listed twice", d.ID))
		}
		seen.Insert(d.ID)
		if d.Health != pluginapi.Healthy && d.Health != pluginapi.Unhealthy {
			st, ev = Fail, append(ev, fmt.Sprintf("device %q has health %q (want %q or %q)", d.ID, d.Health, pluginapi.Healthy, pluginapi.Unhealthy))
		}
		for _, n := range d.GetTopology().GetNodes() {
			switch {
			case n.ID < 0 || n.ID > 1023:
				st, ev = Fail, append(ev, fmt.Sprintf("device %q reports NUMA node %d", d.ID, n.ID))
			case numa != nil && !numa.Has(n.ID):
				if st == Pass {
					st = Warn
				}
				ev = append(ev, fmt.Sprintf("device %q reports NUMA node %d, which this machine does not have (%v)", d.ID, n.ID, sets.List(numa)))
			}
		}
	}
	if len(devs) == 0 {
		if st == Pass {
			st = Warn
		}
		ev = append(ev, "the list is empty")
	}
	return st, ev
}

// hostNUMANodes returns the machine's online NUMA nodes, or nil if unknown.
func hostNUMANodes() sets.Set[int64] {
	b, err := os.ReadFile("/sys/devices/system/node/online")
	if err != nil {
		return nil
	}
	out := sets.New[int64]()
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(part, "-")
		a, err1 := strconv.ParseInt(lo, 10, 64)
		z := a
		var err2 error
		if found {
			z, err2 = strconv.ParseInt(hi, 10, 64)
		}
		if err1 != nil || err2 != nil {
			return nil
		}
		for n := a; n <= z; n++ {
			out.Insert(n)
		}
	}
	return out
}

// ---- 3 ----

func (r *runner) checkAllocate() (Status, []string) {
	if r.first < 0 {
		return Skip, []string{"no accepted registration (check 1)"}
	}
	v := r.reg.snapshot()[r.first]
	if len(v.lists) == 0 {
		return Skip, []string{"no device list (check 2)"}
	}
	var healthy []string
	for _, d := range v.latest() {
		if d.Health == pluginapi.Healthy && !slices.Contains(healthy, d.ID) {
			healthy = append(healthy, d.ID)
		}
	}
	if len(healthy) == 0 {
		return Skip, []string{"the plugin lists no healthy device"}
	}
	st := Pass
	var ev []string
	worse := func(s Status, msg string) {
		if s == Fail || st == Pass {
			st = s
		}
		ev = append(ev, msg)
	}
	for _, ids := range [][]string{healthy[:1], healthy} {
		ctx, cancel := context.WithTimeout(r.ctx, r.t.RPC)
		resp, err := v.ep.Allocate(ctx, ids)
		cancel()
		if err != nil {
			worse(Fail, fmt.Sprintf("Allocate of %d device(s): %v", len(ids), err))
			continue
		}
		if n := len(resp.GetContainerResponses()); n != 1 {
			worse(Fail, fmt.Sprintf("Allocate of %d device(s) with 1 container request: %d container responses", len(ids), n))
			continue
		}
		problems := validateContainerResponse(resp.ContainerResponses[0])
		for _, p := range problems {
			worse(Fail, fmt.Sprintf("Allocate of %d device(s): %s", len(ids), p))
		}
		if len(problems) == 0 {
			c := resp.ContainerResponses[0]
			ev = append(ev, fmt.Sprintf("Allocate of %d device(s): %d envs, %d mounts, %d device nodes, %d CDI devices",
				len(ids), len(c.Envs), len(c.Mounts), len(c.Devices), len(c.CdiDevices)))
		}
	}
	if v.opts.GetGetPreferredAllocationAvailable() {
		size := min(2, len(healthy))
		must := healthy[len(healthy)-1:]
		ctx, cancel := context.WithTimeout(r.ctx, r.t.RPC)
		resp, err := v.ep.GetPreferredAllocation(ctx, healthy, must, size)
		cancel()
		switch {
		case err != nil:
			worse(Fail, fmt.Sprintf("GetPreferredAllocation: %v", err))
		case len(resp.GetContainerResponses()) != 1:
			worse(Fail, fmt.Sprintf("GetPreferredAllocation with 1 container request: %d container responses", len(resp.GetContainerResponses())))
		default:
			got := resp.ContainerResponses[0].DeviceIDs
			if p := checkPreferred(got, healthy, must, size); p != "" {
				worse(Fail, "GetPreferredAllocation: "+p)
			} else {
				ev = append(ev, fmt.Sprintf("GetPreferredAllocation(size %d, must include %s): %v", size, must[0], got))
			}
		}
	}
	if v.opts.GetPreStartRequired() {
		ctx, cancel := context.WithTimeout(r.ctx, r.t.RPC)
		_, err := v.ep.PreStartContainer(ctx, healthy[:1])
		cancel()
		if err != nil {
			worse(Fail, fmt.Sprintf("PreStartContainer: %v", err))
		} else {
			ev = append(ev, "PreStartContainer succeeded")
		}
	}
	return st, ev
}

// validateContainerResponse lists what is malformed in one container's Allocate answer.
func validateContainerResponse(c *pluginapi.ContainerAllocateResponse) []string {
	var out []string
	for k := range c.Envs {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			out = append(out, fmt.Sprintf("env name %q is invalid", k))
		}
	}
	for _, m := range c.Mounts {
		if !filepath.IsAbs(m.ContainerPath) || !filepath.IsAbs(m.HostPath) {
			out = append(out, fmt.Sprintf("mount %q -> %q: both paths must be absolute", m.HostPath, m.ContainerPath))
		}
	}
	for _, d := range c.Devices {
		if !filepath.IsAbs(d.ContainerPath) || !filepath.IsAbs(d.HostPath) {
			out = append(out, fmt.Sprintf("device %q -> %q: both paths must be absolute", d.HostPath, d.ContainerPath))
		}
		if strings.Trim(d.Permissions, "rwm") != "" {
			out = append(out, fmt.Sprintf("device %q: permissions %q are not a combination of r, w and m", d.HostPath, d.Permissions))
		}
	}
	for _, cdi := range c.CdiDevices {
		kind, name, ok := strings.Cut(cdi.Name, "=")
		if !ok || name == "" || !strings.Contains(kind, "/") {
			out = append(out, fmt.Sprintf("CDI device %q is not a fully qualified name (vendor/class=name)", cdi.Name))
		}
	}
	for k := range c.Annotations {
		if k == "" {
			out = append(out, "an annotation has an empty key")
		}
	}
	return out
}

// checkPreferred says what is wrong with a preferred allocation, or "".
func checkPreferred(got, available, must []string, size int) string {
	if len(got) != size {
		return fmt.Sprintf("returned %d devices %v, asked for %d", len(got), got, size)
	}
	if len(sets.New(got...)) != len(got) {
		return fmt.Sprintf("returned a device twice: %v", got)
	}
	for _, m := range must {
		if !slices.Contains(got, m) {
			return fmt.Sprintf("returned %v without must-include device %q", got, m)
		}
	}
	for _, g := range got {
		if !slices.Contains(available, g) {
			return fmt.Sprintf("returned device %q, which was not available", g)
		}
	}
	return ""
}

// ---- 6 ----

func (r *runner) checkStreamClose() (Status, []string) {
	note, err := r.ensureRegistered()
	if err != nil {
		return Skip, []string{err.Error()}
	}
	cur, ok := r.current()
	if !ok {
		return Skip, []string{"no live registration"}
	}
	var ev []string
	if note != "" {
		ev = append(ev, note)
	}
	from := len(r.reg.snapshot())
	closed := time.Now()
	r.reg.closeStream(cur.index)
	select {
	case <-r.proc.exited():
		return Fail, append([]string{fmt.Sprintf("the plugin exited %s after the manager closed its stream (%s)",
			sinceStr(closed, time.Now()), r.proc.exitStatus())}, ev...)
	case <-time.After(r.t.StreamCloseWindow):
	case <-r.ctx.Done():
		return Skip, []string{"run cancelled"}
	}
	if v, ok := r.waitAccepted(from, 0); ok {
		return Pass, append([]string{fmt.Sprintf("the plugin re-registered %s after its stream was closed", sinceStr(closed, v.at))}, ev...)
	}
	// Still running and not re-registered: does its socket still serve a new connection?
	ctx, cancel := context.WithTimeout(r.ctx, r.t.FirstList)
	defer cancel()
	ep, err := endpoint.Dial(ctx, cur.req.ResourceName, cur.socket, endpoint.Config{DialTimeout: r.t.FirstList, OptionsTimeout: r.t.FirstList, Logger: r.cfg.Logger})
	if err != nil {
		return Fail, append([]string{fmt.Sprintf("the plugin is running but neither re-registered nor serves %s: %v", cur.socket, err)}, ev...)
	}
	defer ep.Stop()
	got := make(chan int, 1)
	go func() {
		_ = ep.Run(ctx, func(d []*pluginapi.Device) {
			select {
			case got <- len(d):
			default:
			}
			cancel()
		})
	}()
	select {
	case n := <-got:
		return Pass, append([]string{fmt.Sprintf("the plugin kept serving %s: a new connection listed %d devices", cur.socket, n)}, ev...)
	case <-ctx.Done():
		return Fail, append([]string{fmt.Sprintf("the plugin is running but sends no list on a new connection to %s", cur.socket)}, ev...)
	}
}

// ---- 4 ----

func (r *runner) checkManagerRestart() (Status, []string) {
	note, err := r.ensureRegistered()
	if err != nil {
		return Skip, []string{err.Error()}
	}
	var ev []string
	if note != "" {
		ev = append(ev, note)
	}
	cur, _ := r.lastAccepted()
	before := deviceIDs(r.latestList(cur))
	r.reg.stop()
	from := len(r.reg.snapshot())
	if err := r.reg.start(); err != nil {
		return Fail, append([]string{"restarting the manager probe: " + err.Error()}, ev...)
	}
	restarted := time.Now()
	v, ok := r.waitAccepted(from, r.t.RegisterWarn)
	if !ok {
		msg := fmt.Sprintf("no registration within %v of the manager restart", r.t.RegisterWarn)
		if !r.proc.alive() {
			msg += "; the plugin exited: " + r.proc.exitStatus()
		}
		return Fail, append([]string{msg}, ev...)
	}
	took := v.at.Sub(restarted)
	st := Pass
	first := fmt.Sprintf("re-registered %s after kubelet.sock was re-created", sinceStr(restarted, v.at))
	if took > r.t.Register {
		st = Warn
		first += fmt.Sprintf(" (more than %v)", r.t.Register)
	}
	ev = append([]string{first}, ev...)
	lv, ok := r.waitLists(v.index, 1, r.t.FirstList)
	if !ok {
		return Fail, append(ev, fmt.Sprintf("no ListAndWatch list within %v of re-registration", r.t.FirstList))
	}
	after := deviceIDs(lv.lists[0].devices)
	if !before.Equal(after) {
		return Fail, append(ev, fmt.Sprintf("device IDs changed: missing %v, new %v",
			sets.List(before.Difference(after)), sets.List(after.Difference(before))))
	}
	return st, append(ev, fmt.Sprintf("same %d device IDs", after.Len()))
}

// latestList returns the last list of v, or of the first registration if v has none.
func (r *runner) latestList(v regView) []*pluginapi.Device {
	if l := v.latest(); l != nil {
		return l
	}
	if r.first >= 0 {
		return r.reg.snapshot()[r.first].latest()
	}
	return nil
}

func deviceIDs(devs []*pluginapi.Device) sets.Set[string] {
	s := sets.New[string]()
	for _, d := range devs {
		s.Insert(d.ID)
	}
	return s
}

// ---- 8 ----

func (r *runner) checkIdleCPU() (Status, []string) {
	if !r.proc.alive() {
		return Skip, []string{"the plugin is not running: " + r.proc.exitStatus()}
	}
	c0, err := r.proc.cpuTime()
	if err != nil {
		return Skip, []string{err.Error()}
	}
	t0 := time.Now()
	if !r.sleep(r.t.CPUWindow) {
		return Skip, []string{"run cancelled"}
	}
	c1, err := r.proc.cpuTime()
	if err != nil {
		return Skip, []string{err.Error()}
	}
	if !r.proc.alive() {
		return Skip, []string{"the plugin exited during the window: " + r.proc.exitStatus()}
	}
	wall := time.Since(t0)
	use := (c1 - c0).Seconds() / wall.Seconds()
	msg := fmt.Sprintf("%.1f%% of one core over %s after the manager restart (limit %.0f%%)", use*100, fmtDuration(wall), r.t.CPULimit*100)
	if use >= r.t.CPULimit {
		return Fail, []string{msg, "a watcher that busy-loops once kubelet.sock is re-created looks like this"}
	}
	return Pass, []string{msg}
}

// ---- 10 ----

func (r *runner) checkHealth() (Status, []string) {
	if r.cfg.HealthTrigger == "" {
		return Skip, []string{"not configured (--health-trigger, --health-restore)"}
	}
	note, err := r.ensureRegistered()
	if err != nil {
		return Skip, []string{err.Error()}
	}
	var ev []string
	if note != "" {
		ev = append(ev, note)
	}
	cur, _ := r.current()
	cur, ok := r.waitLists(cur.index, 1, r.t.FirstList)
	if !ok {
		return Fail, append(ev, "no device list to start from")
	}
	var dev string
	for _, d := range cur.latest() {
		if d.Health == pluginapi.Healthy {
			dev = d.ID
			break
		}
	}
	if dev == "" {
		return Skip, append(ev, "no healthy device to make unhealthy")
	}
	healthOf := func(v regView) string {
		for _, d := range v.latest() {
			if d.ID == dev {
				return d.Health
			}
		}
		return ""
	}
	for _, step := range []struct {
		cmd, want string
	}{{r.cfg.HealthTrigger, pluginapi.Unhealthy}, {r.cfg.HealthRestore, pluginapi.Healthy}} {
		if step.cmd == "" {
			continue
		}
		t0 := time.Now()
		if out, err := r.shell(step.cmd, dev); err != nil {
			return Fail, append(ev, fmt.Sprintf("%q failed: %v: %s", step.cmd, err, out))
		}
		snap, ok := r.reg.waitFor(r.ctx, r.t.Health, func(s []regView) bool { return healthOf(s[cur.index]) == step.want })
		if !ok {
			return Fail, append(ev, fmt.Sprintf("device %s not reported %s within %v of %q (last: %q)",
				dev, step.want, r.t.Health, step.cmd, healthOf(snap[cur.index])))
		}
		ev = append(ev, fmt.Sprintf("device %s reported %s %s after %q", dev, step.want, sinceStr(t0, time.Now()), step.cmd))
	}
	return Pass, ev
}

// shell runs cmd with sh -c, telling it the device and the directory.
func (r *runner) shell(cmd, dev string) (string, error) {
	ctx, cancel := context.WithTimeout(r.ctx, r.t.Health)
	defer cancel()
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	c.Env = append(os.Environ(), "KDM_CONFORMANCE_DEVICE="+dev, "KDM_CONFORMANCE_DIR="+r.cfg.Dir)
	out, err := c.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// ---- 5 ----

func (r *runner) checkManagerAbsent() (Status, []string) {
	r.reg.stop()
	r.proc.kill(5 * time.Second)
	if err := r.proc.start(); err != nil {
		return Fail, []string{err.Error()}
	}
	started := time.Now()
	var early string
	select {
	case <-r.proc.exited():
		early = fmt.Sprintf("the plugin exited %s after start while the manager was absent (%s)", sinceStr(started, time.Now()), r.proc.exitStatus())
	case <-time.After(r.t.ManagerDelay):
	case <-r.ctx.Done():
		return Skip, []string{"run cancelled"}
	}
	from := len(r.reg.snapshot())
	if err := r.reg.start(); err != nil {
		return Fail, []string{"starting the manager probe: " + err.Error()}
	}
	appeared := time.Now()
	if early == "" {
		if v, ok := r.waitAccepted(from, r.t.Register); ok {
			return Pass, []string{fmt.Sprintf("registered %s after kubelet.sock appeared (%s after start), without exiting",
				sinceStr(appeared, v.at), sinceStr(started, v.at))}
		}
		if r.proc.alive() {
			return Fail, []string{fmt.Sprintf("no registration within %v of kubelet.sock appearing", r.t.Register)}
		}
		early = "the plugin exited after kubelet.sock appeared (" + r.proc.exitStatus() + ")"
	}
	// What a restart loop (a DaemonSet's restartPolicy) would do.
	restarted := time.Now()
	if err := r.proc.start(); err != nil {
		return Fail, []string{early, err.Error()}
	}
	if v, ok := r.waitAccepted(from, r.t.Register); ok {
		return Warn, []string{early, fmt.Sprintf("registered %s after being restarted: only a restart loop saves it", sinceStr(restarted, v.at))}
	}
	return Fail, []string{early, fmt.Sprintf("no registration within %v even after a restart", r.t.Register)}
}

// ---- 9 ----

func (r *runner) checkSigterm() (Status, []string) {
	note, err := r.ensureRegistered()
	if err != nil {
		return Skip, []string{err.Error()}
	}
	var ev []string
	if note != "" {
		ev = append(ev, note)
	}
	cur, _ := r.lastAccepted()
	sent := time.Now()
	if err := r.proc.signal(syscall.SIGTERM); err != nil {
		return Fail, append(ev, "sending SIGTERM: "+err.Error())
	}
	select {
	case <-r.proc.exited():
	case <-time.After(r.t.Term):
		r.proc.kill(5 * time.Second)
		return Fail, append([]string{fmt.Sprintf("still running %v after SIGTERM; killed", r.t.Term)}, ev...)
	case <-r.ctx.Done():
		return Skip, []string{"run cancelled"}
	}
	exited := fmt.Sprintf("exited %s after SIGTERM (%s)", sinceStr(sent, time.Now()), r.proc.exitStatus())
	if _, err := os.Lstat(cur.socket); err == nil {
		return Warn, append([]string{exited, "but left its socket " + cur.socket + " behind"}, ev...)
	}
	return Pass, append([]string{exited + " and removed its socket"}, ev...)
}

// ---- 7 ----

func (r *runner) checkDuplicates() (Status, []string) {
	snap := r.reg.snapshot()
	var ev []string
	for i, b := range snap {
		// a is the previous Register of the same resource from the same process to the same
		// manager instance.
		for j := i - 1; j >= 0; j-- {
			a := snap[j]
			if a.generation != b.generation || a.process != b.process || a.req.ResourceName != b.req.ResourceName {
				continue
			}
			if a.accepted() && (a.closedAt.IsZero() || a.closedAt.After(b.at)) &&
				(a.streamEnd.IsZero() || a.streamEnd.After(b.at)) {
				ev = append(ev, fmt.Sprintf("Register #%d for %q came %s after #%d while the first connection was still streaming",
					i+1, b.req.ResourceName, sinceStr(a.at, b.at), j+1))
			}
			break
		}
	}
	total := fmt.Sprintf("%d Register calls in the run", len(snap))
	if len(ev) > 0 {
		return Warn, append(ev, total)
	}
	return Pass, []string{"no duplicate registrations; " + total}
}

package conformance

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func (r *runner) checkRegistration() (Status, []string) {
	start := time.Now()
	if _, ok := r.reg.waitFor(r.ctx, r.t.Register, func(s []regView) bool { return len(s) > 0 }); !ok {
		ev := []string{fmt.Sprintf("no Register call within %v of start", r.t.Register)}
		if !r.proc.alive() {
			ev = append(ev, "the plugin exited: "+r.proc.exitStatus())
		}
		return Fail, ev
	}
	snap := r.settle(0)
	// Group the calls by resource, in the order of each resource's first call.
	var names []string
	byName := map[string][]regView{}
	for _, v := range snap {
		n := v.req.ResourceName
		if _, seen := byName[n]; !seen {
			names = append(names, n)
		}
		byName[n] = append(byName[n], v)
	}
	for _, n := range names {
		for _, v := range byName[n] {
			if v.accepted() {
				r.resources = append(r.resources, n)
				r.first[n] = v.index
				break
			}
		}
	}
	st := Pass
	var ev []string
	if len(names) > 1 {
		ev = append(ev, fmt.Sprintf("%d resources registered by one plugin process: %s; each is checked apart", len(names), quoteList(names)))
	}
	for _, n := range names {
		lbl := ""
		if len(names) > 1 {
			lbl = n + ": "
		}
		s, e := r.firstRegistration(start, byName[n], lbl)
		st = worse(st, s)
		ev = append(ev, e...)
	}
	return st, ev
}

// firstRegistration judges the first Register calls of one resource (regs, in arrival order).
func (r *runner) firstRegistration(start time.Time, regs []regView, lbl string) (Status, []string) {
	v := regs[0]
	if !v.accepted() {
		ev := []string{lbl + "Register refused: " + v.err.Error(),
			lbl + fmt.Sprintf("request: version %q, resource %q, endpoint %q", v.req.Version, v.req.ResourceName, v.req.Endpoint)}
		for _, later := range regs[1:] {
			if later.accepted() {
				ev = append(ev, lbl+fmt.Sprintf("a later Register (#%d) was accepted; later checks use it", later.index+1))
				break
			}
		}
		return Fail, ev
	}
	ev := []string{lbl + fmt.Sprintf("Register after %s: version %q, resource %q, endpoint %q", sinceStr(start, v.at),
		v.req.Version, v.req.ResourceName, v.req.Endpoint)}
	reqOpts := v.req.GetOptions()
	if reqOpts == nil {
		reqOpts = &pluginapi.DevicePluginOptions{}
	}
	ev = append(ev, lbl+"GetDevicePluginOptions: "+optsString(v.opts))
	if !proto.Equal(reqOpts, v.opts) {
		return Warn, append(ev, lbl+fmt.Sprintf("Register options differ: %s; the kubelet uses only GetDevicePluginOptions, so the Register options mislead other readers",
			optsString(reqOpts)))
	}
	return Pass, ev
}

// registrationCheck is check 1, run by checkRegistration above.
var registrationCheck = check{1, "registration",
	"registers within 5s of start with a valid version, resource name and endpoint inside the directory; Register options equal GetDevicePluginOptions; each resource of a plugin that serves several is judged apart",
	"the kubelet's Register (plugin/v1beta1 server) accepts only version v1beta1 and an extended resource name, joins the endpoint to the socket directory, dials it and reads the options from GetDevicePluginOptions, ignoring those in the request",
	(*runner).checkRegistration}

func optsString(o *pluginapi.DevicePluginOptions) string {
	return fmt.Sprintf("preStartRequired=%t getPreferredAllocationAvailable=%t",
		o.GetPreStartRequired(), o.GetGetPreferredAllocationAvailable())
}

func (r *runner) checkListAndWatch() (Status, []string) {
	if len(r.resources) == 0 {
		return Skip, []string{errNoRegistration.Error()}
	}
	st := Skip
	var ev []string
	for _, res := range r.resources {
		lbl, i := r.label(res), r.first[res]
		v, ok := r.waitLists(i, 1, time.Until(r.reg.snapshot()[i].at.Add(r.t.FirstList)))
		if !ok {
			msg := fmt.Sprintf("no ListAndWatch list within %v of registration", r.t.FirstList)
			if !v.streamEnd.IsZero() {
				msg = fmt.Sprintf("the ListAndWatch stream ended %s after registration without a list", sinceStr(v.at, v.streamEnd))
			}
			st = worse(st, Fail)
			ev = append(ev, lbl+msg)
			continue
		}
		l := v.lists[0]
		ev = append(ev, lbl+fmt.Sprintf("first list after %s: %d devices", sinceStr(v.at, l.at), len(l.devices)))
		s, problems := validateDevices(l.devices, hostNUMANodes())
		st = worse(st, s)
		for _, p := range problems {
			ev = append(ev, lbl+p)
		}
	}
	return st, append(ev, r.onFirstProcess())
}

// listAndWatchCheck is check 2, run by checkListAndWatch above.
var listAndWatchCheck = check{2, "list-and-watch",
	"the first ListAndWatch list of each resource arrives within 5s; device IDs unique; health values and NUMA node IDs plausible",
	"the kubelet's genericDeviceUpdateCallback replaces the resource's device sets with each list, keyed by ID; deviceNUMANodes feeds topology hints and ignores nodes the machine does not have",
	(*runner).checkListAndWatch}

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

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

// registrationCheck is check 1, run by checkRegistration above.
var registrationCheck = check{1, "registration",
	"registers within 5s of start with a valid version, resource name and endpoint inside the directory; Register options equal GetDevicePluginOptions",
	"the kubelet's Register (plugin/v1beta1 server) accepts only version v1beta1 and an extended resource name, joins the endpoint to the socket directory, dials it and reads the options from GetDevicePluginOptions, ignoring those in the request",
	(*runner).checkRegistration}

func optsString(o *pluginapi.DevicePluginOptions) string {
	return fmt.Sprintf("preStartRequired=%t getPreferredAllocationAvailable=%t",
		o.GetPreStartRequired(), o.GetGetPreferredAllocationAvailable())
}

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

// listAndWatchCheck is check 2, run by checkListAndWatch above.
var listAndWatchCheck = check{2, "list-and-watch",
	"the first ListAndWatch list arrives within 5s; device IDs unique; health values and NUMA node IDs plausible",
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

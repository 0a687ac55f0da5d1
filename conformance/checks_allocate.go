package conformance

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func (r *runner) checkAllocate() (Status, []string) {
	if len(r.resources) == 0 {
		return Skip, []string{errNoRegistration.Error()}
	}
	st := Skip
	var ev []string
	snap := r.reg.snapshot()
	for _, res := range r.resources {
		s, e := r.allocate(snap[r.first[res]])
		st = worse(st, s)
		for _, line := range e {
			ev = append(ev, r.label(res)+line)
		}
	}
	return st, append(ev, r.onFirstProcess())
}

// allocate runs check 3 on one resource's first registration.
func (r *runner) allocate(v regView) (Status, []string) {
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
			ev = append(ev, fmt.Sprintf("Allocate of %d device(s): %s", len(ids), answerCounts(c)))
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

// allocateCheck is check 3, run by checkAllocate above.
var allocateCheck = check{3, "allocate",
	"Allocate for one device and for all devices of each resource answers one response per container request with absolute, well-formed paths; GetPreferredAllocation honours must-include and size; PreStartContainer succeeds when required",
	"the kubelet's allocateContainerResources sends one container request per Allocate and fails admission without a container response; callGetPreferredAllocationIfAvailable reads only the first container's IDs; PreStartContainer runs on every container start when PreStartRequired",
	(*runner).checkAllocate}

// answerCounts summarises one container's Allocate answer, e.g. "2 envs, 0 mounts, 1 device
// node, 0 CDI devices, 1 annotation": an answer that carries only annotations (CDI devices
// named in annotations, as some plugins do) shows as such rather than as empty.
func answerCounts(c *pluginapi.ContainerAllocateResponse) string {
	return fmt.Sprintf("%s, %s, %s, %s, %s", plural(len(c.Envs), "env", "envs"), plural(len(c.Mounts), "mount", "mounts"),
		plural(len(c.Devices), "device node", "device nodes"), plural(len(c.CdiDevices), "CDI device", "CDI devices"),
		plural(len(c.Annotations), "annotation", "annotations"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
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

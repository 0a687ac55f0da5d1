package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/devicemanager"
)

// getAPIVersion is the apiVersion of every `kdm get -o json` document. Fields are only ever
// added under it; a change that removes or renames one gets a new version.
const getAPIVersion = "kdm.get/v1"

// getList is what `kdm get` prints: a JSON document and a table.
type getList interface {
	printTable(w io.Writer)
}

// listHeader starts every `kdm get -o json` document.
type listHeader struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// podList is `kdm get pods`.
type podList struct {
	listHeader
	// Runtime says whether kdm runs the pods' containers; absent when kdm's HTTP endpoint did
	// not answer.
	Runtime *statusapi.RuntimeInfo `json:"runtime,omitempty"`
	Items   []getPod               `json:"items"`
}

// getPod is one pod: what podresources lists for it, and its admission outcome from kdm's
// state when known.
type getPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
	// Phase is Admitted, Pending or Rejected; empty when kdm's HTTP endpoint did not answer.
	Phase   string `json:"phase,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// RuntimePhase is the phase of the pod's containers in the container runtime (Pending,
	// Running, Succeeded, Failed); empty when kdm runs no containers.
	RuntimePhase string `json:"runtimePhase,omitempty"`
	// Terminating is set while a removed pod's containers are being stopped: its devices are
	// held until the container runtime confirms they are gone.
	Terminating *podresult.Termination `json:"terminating,omitempty"`
	// Waiting is what a Pending pod waits for: a resource whose plugin has not registered.
	Waiting    *getWait       `json:"waiting,omitempty"`
	Containers []getContainer `json:"containers"`
}

// getWait is what a pending pod waits for, and how long it has left.
type getWait struct {
	Container        string  `json:"container"`
	Resource         string  `json:"resource"`
	RemainingSeconds float64 `json:"remainingSeconds"`
}

// getContainer is one container and the devices podresources reports for it.
type getContainer struct {
	Name    string           `json:"name"`
	Devices []getDeviceGroup `json:"devices"`
}

// getDeviceGroup is a container's devices of one resource.
type getDeviceGroup struct {
	Resource string   `json:"resource"`
	IDs      []string `json:"ids"`
	// NUMA are the NUMA nodes podresources reports for them, ascending; absent without topology.
	NUMA []int64 `json:"numa,omitempty"`
}

// newPodList joins podresources' pods (the devices) with kdm's state (the admission
// outcome); st may be nil. Pods kdm knows that podresources does not list (rejected or
// pending ones) are listed without devices.
func newPodList(pr *podresourcesv1.ListPodResourcesResponse, st *statusapi.PageState) *podList {
	known := map[string]*statusapi.PagePod{}
	if st != nil {
		for i := range st.Pods {
			p := &st.Pods[i]
			known[p.Namespace+"/"+p.Name] = p
		}
	}
	listed := map[string]bool{}
	out := &podList{listHeader: listHeader{getAPIVersion, "PodList"}, Items: []getPod{}}
	if st != nil {
		out.Runtime = &st.Runtime
	}
	for _, p := range pr.GetPodResources() {
		gp := getPod{Namespace: p.GetNamespace(), Name: p.GetName(), Containers: []getContainer{}}
		for _, c := range p.GetContainers() {
			gp.Containers = append(gp.Containers, getContainer{Name: c.GetName(), Devices: deviceGroups(c.GetDevices())})
		}
		key := gp.Namespace + "/" + gp.Name
		listed[key] = true
		if k := known[key]; k != nil {
			gp.setOutcome(k, st.Time)
		}
		out.Items = append(out.Items, gp)
	}
	if st != nil {
		for i := range st.Pods {
			k := &st.Pods[i]
			if listed[k.Namespace+"/"+k.Name] {
				continue
			}
			gp := getPod{Namespace: k.Namespace, Name: k.Name, Containers: []getContainer{}}
			for _, c := range k.Containers {
				gp.Containers = append(gp.Containers, getContainer{Name: c.Name, Devices: []getDeviceGroup{}})
			}
			gp.setOutcome(k, st.Time)
			out.Items = append(out.Items, gp)
		}
	}
	sort.SliceStable(out.Items, func(i, j int) bool {
		a, b := out.Items[i], out.Items[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return out
}

// setOutcome copies the pod's admission outcome from kdm's state, taken at now.
func (p *getPod) setOutcome(k *statusapi.PagePod, now time.Time) {
	p.UID, p.Phase, p.Reason, p.Message = string(k.UID), k.Phase, k.Reason, k.Message
	p.RuntimePhase = k.RuntimePhase
	p.Terminating = k.Terminating
	if w := k.Waiting; w != nil {
		p.Waiting = &getWait{Container: w.Container, Resource: w.Resource,
			RemainingSeconds: max(w.Deadline.Sub(now), 0).Seconds()}
	}
}

// deviceGroups groups a container's podresources devices by resource, IDs sorted.
func deviceGroups(devs []*podresourcesv1.ContainerDevices) []getDeviceGroup {
	byRes := map[string]*getDeviceGroup{}
	numa := map[string]map[int64]bool{}
	for _, d := range devs {
		g := byRes[d.GetResourceName()]
		if g == nil {
			g = &getDeviceGroup{Resource: d.GetResourceName(), IDs: []string{}}
			byRes[g.Resource], numa[g.Resource] = g, map[int64]bool{}
		}
		g.IDs = append(g.IDs, d.GetDeviceIds()...)
		for _, n := range d.GetTopology().GetNodes() {
			numa[g.Resource][n.GetID()] = true
		}
	}
	out := []getDeviceGroup{}
	for _, res := range sortedStrings(byRes) {
		g := byRes[res]
		sort.Strings(g.IDs)
		for n := range numa[res] {
			g.NUMA = append(g.NUMA, n)
		}
		sort.Slice(g.NUMA, func(i, j int) bool { return g.NUMA[i] < g.NUMA[j] })
		out = append(out, *g)
	}
	return out
}

// status is the pod's STATUS cell: its phase, with the reason of a rejection or what a
// pending pod waits for.
func (p getPod) status() string {
	switch {
	case p.Phase == "":
		return "-"
	case p.Terminating != nil:
		return "Terminating" // as kubectl shows a pod being deleted, whatever its phase
	case p.Waiting != nil:
		// Before the reason: a waiting pod's reason (WaitingForDevicePlugin) says less.
		left := time.Duration(p.Waiting.RemainingSeconds * float64(time.Second)).Round(time.Second)
		return fmt.Sprintf("%s: waiting %v for %s", p.Phase, left, p.Waiting.Resource)
	case p.Reason != "":
		return p.Phase + ": " + p.Reason
	case p.RuntimePhase != "":
		return p.Phase + ", " + p.RuntimePhase
	}
	return p.Phase
}

func (l *podList) printTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tSTATUS\tCONTAINER\tRESOURCE\tDEVICES")
	for _, p := range l.Items {
		rows := 0
		for _, c := range p.Containers {
			for _, g := range c.Devices {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", display(p.Namespace), display(p.Name), p.status(),
					display(c.Name), display(g.Resource), strings.Join(displayAll(g.IDs), ","))
				rows++
			}
		}
		if rows == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\n", display(p.Namespace), display(p.Name), p.status())
		}
	}
	_ = tw.Flush()
	if l.Runtime != nil && !l.Runtime.ContainersRun && l.Runtime.Message != "" {
		fmt.Fprintf(w, "Note: %s.\n", l.Runtime.Message)
	}
}

// deviceList is `kdm get devices`.
type deviceList struct {
	listHeader
	Items []getDevice `json:"items"`
	// RecordDisagreements are what kdm's start found between the checkpoint and its own pod
	// records (get_disagreements.go); absent when they agreed.
	RecordDisagreements []statusapi.PageDisagreement `json:"recordDisagreements,omitempty"`
}

// getDevice is one device as kdm's manager holds it.
type getDevice struct {
	Resource string `json:"resource"`
	ID       string `json:"id"`
	// Health is Healthy, Unhealthy or Unknown, as the plugin last reported it.
	Health string  `json:"health"`
	NUMA   []int64 `json:"numa,omitempty"`
	// Holders are the containers it is assigned to; empty for a free device.
	Holders []statusapi.PageHolder `json:"holders"`
	// Reserved is true while an allocation in flight has picked it.
	Reserved bool `json:"reserved,omitempty"`
}

func newDeviceList(st *statusapi.PageState) *deviceList {
	out := &deviceList{listHeader: listHeader{getAPIVersion, "DeviceList"}, Items: []getDevice{},
		RecordDisagreements: st.RecordDisagreements}
	for _, r := range st.Resources {
		for _, d := range r.Devices {
			gd := getDevice{Resource: r.Name, ID: d.ID, Health: d.Health, NUMA: d.NUMANodes, Holders: d.Holders, Reserved: d.Reserved}
			if gd.Holders == nil {
				gd.Holders = []statusapi.PageHolder{}
			}
			out.Items = append(out.Items, gd)
		}
	}
	return out
}

// heldBy is a device's HELD BY cell: each holding pod with its containers, "-" when free.
func (d getDevice) heldBy() string {
	if len(d.Holders) == 0 {
		if d.Reserved {
			return "(being allocated)"
		}
		return "-"
	}
	var pods []string
	containers := map[string][]string{}
	for _, h := range d.Holders {
		if _, ok := containers[h.Pod]; !ok {
			pods = append(pods, h.Pod)
		}
		containers[h.Pod] = append(containers[h.Pod], display(h.Container))
	}
	parts := make([]string, len(pods))
	for i, p := range pods {
		parts[i] = display(p) + " (" + strings.Join(containers[p], ",") + ")"
	}
	return strings.Join(parts, "; ")
}

func (l *deviceList) printTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tDEVICE\tHEALTH\tNUMA\tHELD BY")
	for _, d := range l.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", display(d.Resource), display(d.ID), display(d.Health), numaCell(d.NUMA), d.heldBy())
	}
	_ = tw.Flush()
	printDisagreements(w, l.RecordDisagreements)
}

// numaCell lists NUMA nodes, "-" for none.
func numaCell(nodes []int64) string {
	if len(nodes) == 0 {
		return "-"
	}
	s := make([]string, len(nodes))
	for i, n := range nodes {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

// resourceList is `kdm get resources`.
type resourceList struct {
	listHeader
	Items []getResource `json:"items"`
}

// getResource is one device resource as the node publishes it, with its devices counted.
type getResource struct {
	Name string `json:"name"`
	// Capacity and Allocatable are what the Node's status carries: all devices, and the
	// healthy ones.
	Capacity    int64 `json:"capacity"`
	Allocatable int64 `json:"allocatable"`
	// Devices are the devices kdm knows; InUse those assigned to containers; Free the healthy
	// ones no container holds and no allocation is picking; Unhealthy those not Healthy.
	Devices   int `json:"devices"`
	InUse     int `json:"inUse"`
	Free      int `json:"free"`
	Unhealthy int `json:"unhealthy"`
	// Plugin is the state of its device plugin: Running, Stopped, None or Removed.
	Plugin string `json:"plugin"`
}

func newResourceList(st *statusapi.PageState) *resourceList {
	out := &resourceList{listHeader: listHeader{getAPIVersion, "ResourceList"}, Items: []getResource{}}
	for _, r := range st.Resources {
		gr := getResource{Name: r.Name, Capacity: r.Capacity, Allocatable: r.Allocatable, Devices: len(r.Devices), Plugin: r.Endpoint.State}
		for _, d := range r.Devices {
			healthy := d.Health == devicemanager.DeviceHealthy
			switch {
			case len(d.Holders) > 0:
				gr.InUse++
			case healthy && !d.Reserved:
				gr.Free++
			}
			if !healthy {
				gr.Unhealthy++
			}
		}
		out.Items = append(out.Items, gr)
	}
	return out
}

func (l *resourceList) printTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tCAPACITY\tALLOCATABLE\tIN USE\tFREE\tUNHEALTHY\tPLUGIN")
	for _, r := range l.Items {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", display(r.Name), r.Capacity, r.Allocatable, r.InUse, r.Free, r.Unhealthy, display(r.Plugin))
	}
	_ = tw.Flush()
}

// pluginList is `kdm get plugins`.
type pluginList struct {
	listHeader
	Items []getPlugin `json:"items"`
}

// getPlugin is the device plugin of one resource.
type getPlugin struct {
	Resource string `json:"resource"`
	// State is Running, Stopped (its resource lives on for the grace period), None (no
	// plugin; containers still hold devices) or Removed (removed after the grace period).
	State string `json:"state"`
	// Socket is the plugin's endpoint socket; empty for a resource known only from the
	// checkpoint.
	Socket string `json:"socket,omitempty"`
	// Restored is true for a resource restored from the checkpoint whose plugin has not
	// registered since kdm started.
	Restored  bool       `json:"restored,omitempty"`
	StoppedAt *time.Time `json:"stoppedAt,omitempty"`
	// GraceRemainingSeconds is what is left of a stopped plugin's grace period.
	GraceRemainingSeconds *float64   `json:"graceRemainingSeconds,omitempty"`
	RemovedAt             *time.Time `json:"removedAt,omitempty"`
}

func newPluginList(st *statusapi.PageState) *pluginList {
	out := &pluginList{listHeader: listHeader{getAPIVersion, "PluginList"}, Items: []getPlugin{}}
	for _, r := range st.Resources {
		e := r.Endpoint
		p := getPlugin{Resource: r.Name, State: e.State, Socket: e.Socket, Restored: e.Restored, StoppedAt: e.StoppedAt, RemovedAt: e.RemovedAt}
		if e.StoppedAt != nil {
			left := float64(e.GraceRemainingMs) / 1000
			p.GraceRemainingSeconds = &left
		}
		out.Items = append(out.Items, p)
	}
	return out
}

// grace is a plugin's GRACE LEFT cell.
func (p getPlugin) grace() string {
	switch {
	case p.GraceRemainingSeconds == nil:
		return "-"
	case *p.GraceRemainingSeconds <= 0:
		return "expired"
	}
	return (time.Duration(*p.GraceRemainingSeconds * float64(time.Second))).Round(time.Second).String()
}

func (l *pluginList) printTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tSTATE\tGRACE LEFT\tENDPOINT")
	for _, p := range l.Items {
		socket := "-"
		if p.Socket != "" {
			socket = display(p.Socket)
		} else if p.Restored {
			socket = "(from the checkpoint; not registered since kdm started)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", display(p.Resource), display(p.State), p.grace(), socket)
	}
	_ = tw.Flush()
}

package statusapi

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/devicemanager"
)

// The status page: a read-only view of the node served at / beside /status. page/ holds
// plain HTML, CSS and JavaScript, embedded in the binary; the page renders PageState, which
// /api/state serves once and /api/stream pushes as server-sent events whenever it changes.

//go:embed page
var pageFiles embed.FS

// PageState is the node as the status page shows it.
type PageState struct {
	// Node is the node name, if the agent has one.
	Node string `json:"node,omitempty"`
	// Time is when the state was taken.
	Time time.Time `json:"time"`
	// Policy names the device manager's policy in force (devicemanager.Policy.Name): "kdm", a
	// kubelet minor's policy name (devicemanager.KubeletVersions), or "custom".
	Policy             string         `json:"policy"`
	GracePeriodSeconds float64        `json:"gracePeriodSeconds"`
	Resources          []PageResource `json:"resources"`
	Pods               []PagePod      `json:"pods"`
	// Runtime says whether kdm runs the pods' containers, and through which runtime.
	Runtime RuntimeInfo `json:"runtime"`
	// Events are the most recent events, newest first.
	Events []Event `json:"events"`
	// RecordDisagreements are what the start found between the checkpoint and kdm's own pod
	// records; absent when they agreed.
	RecordDisagreements []PageDisagreement `json:"recordDisagreements,omitempty"`
}

// PageResource is one device resource: its published capacity and allocatable, its endpoint
// and its devices.
type PageResource struct {
	Name        string `json:"name"`
	Capacity    int64  `json:"capacity"`
	Allocatable int64  `json:"allocatable"`
	// Free counts the devices a new pod could get now: healthy, held by no container and not
	// being allocated. It is 0 while the resource's plugin is not running.
	Free     int64        `json:"free"`
	Endpoint PageEndpoint `json:"endpoint"`
	Devices  []PageDevice `json:"devices"`
}

// PageEndpoint is the state of a resource's device plugin.
type PageEndpoint struct {
	// State is Running, Stopped (within or past its grace period), None (no plugin, devices
	// still held) or Removed (removed after the grace period).
	State  string `json:"state"`
	Socket string `json:"socket,omitempty"`
	// Restored is true for a resource restored from the checkpoint whose plugin has not
	// registered since the agent started.
	Restored  bool       `json:"restored,omitempty"`
	StoppedAt *time.Time `json:"stoppedAt,omitempty"`
	// GraceRemainingMs is what is left of the grace period of a stopped endpoint, at Time.
	GraceRemainingMs int64      `json:"graceRemainingMs,omitempty"`
	RemovedAt        *time.Time `json:"removedAt,omitempty"`
}

// EndpointRemoved is PageEndpoint.State for a resource removed after its grace period.
const EndpointRemoved = "Removed"

// PageDevice is one device with its health, NUMA nodes and holders.
type PageDevice struct {
	ID        string       `json:"id"`
	Health    string       `json:"health"`
	NUMANodes []int64      `json:"numa"`
	Holders   []PageHolder `json:"holders,omitempty"`
	Reserved  bool         `json:"reserved,omitempty"`
}

// PageHolder is a container holding a device.
type PageHolder struct {
	// Pod is namespace/name, or the pod UID for a pod the agent no longer tracks.
	Pod       string `json:"pod"`
	Container string `json:"container"`
}

// PagePod is one pod's admission outcome.
type PagePod struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	Phase     string    `json:"phase"`
	Reason    string    `json:"reason,omitempty"`
	Message   string    `json:"message,omitempty"`
	Warning   string    `json:"warning,omitempty"`
	Updated   time.Time `json:"updated"`
	// Waiting says what a Pending pod waits for, when known.
	Waiting *PageWait `json:"waiting,omitempty"`
	// RuntimePhase is the phase the container runtime's states give (Pending, Running,
	// Succeeded, Failed); empty when kdm runs no containers.
	RuntimePhase string `json:"runtimePhase,omitempty"`
	// Terminating is set from the pod's removal until the container runtime confirms that its
	// containers are gone; its devices stay held until then (podresult.Termination).
	Terminating *podresult.Termination `json:"terminating,omitempty"`
	Containers  []PageContainer        `json:"containers,omitempty"`
}

// PageWait is what a waiting pod waits for and until when.
type PageWait struct {
	Container string    `json:"container"`
	Resource  string    `json:"resource"`
	Deadline  time.Time `json:"deadline"`
	// RemainingMs is the time left until Deadline, at PageState.Time.
	RemainingMs int64 `json:"remainingMs"`
}

// PageContainer is one container's devices per resource.
type PageContainer struct {
	Name    string              `json:"name"`
	Init    bool                `json:"init,omitempty"`
	Sidecar bool                `json:"sidecar,omitempty"`
	Devices map[string][]string `json:"devices,omitempty"`
	// Unhealthy are the container's devices its result says are Unhealthy, sorted.
	Unhealthy []string `json:"unhealthy,omitempty"`
	// State is the container's state in the runtime: waiting, running or exited, with the
	// reason or exit code ("exited 3"); empty when kdm runs no containers.
	State        string `json:"state,omitempty"`
	RestartCount int32  `json:"restartCount,omitempty"`
}

// Event is one entry of the agent's timeline of recent events, as the status page shows it.
type Event struct {
	Time time.Time `json:"time"`
	// Kind is one of the Event* kinds.
	Kind     string `json:"kind"`
	Resource string `json:"resource,omitempty"`
	// Pod is namespace/name.
	Pod     string `json:"pod,omitempty"`
	Message string `json:"message"`
	// Deadline is, for a Waiting event, when the pod's admission gives up waiting; the page
	// counts down to it.
	Deadline *time.Time `json:"deadline,omitempty"`
}

// Event kinds.
const (
	EventStarted      = "Started"      // the agent started (or restarted)
	EventRegistered   = "Registered"   // a device plugin registered, or registered again
	EventDisconnected = "Disconnected" // a plugin went away; its resource is in its grace period
	EventRemoved      = "Removed"      // a resource was removed after its grace period
	EventHealth       = "Health"       // a device changed health while its plugin ran
	EventAdmitted     = "Admitted"
	EventWaiting      = "Waiting" // admission waits for a device plugin
	EventRejected     = "Rejected"
	EventPodRemoved   = "PodRemoved"
	EventConflict     = "Conflict" // a pod's restored devices are claimed by other pods too, or no longer
)

// PageResources describes the manager's resources, with the capacity and allocatable
// published for them, and those removed after their grace period (gone, with when), for the
// page; names maps pod UIDs to namespace/name for the devices' holders. The result is in the
// order of views, then the removed resources in no order.
func PageResources(views []devicemanager.ResourceView, capacity, allocatable v1.ResourceList,
	names map[types.UID]string, gone map[string]time.Time) []PageResource {
	out := []PageResource{}
	listed := map[string]bool{}
	for _, v := range views {
		listed[v.Name] = true
		r := PageResource{Name: v.Name, Devices: make([]PageDevice, 0, len(v.Devices)),
			Capacity: quantity(capacity, v.Name), Allocatable: quantity(allocatable, v.Name)}
		r.Endpoint = PageEndpoint{State: string(v.Endpoint.State), Socket: v.Endpoint.Socket}
		if at, ok := gone[v.Name]; ok && v.Endpoint.State == devicemanager.EndpointNone {
			at := at.UTC() // removed, but containers still hold some of its devices
			r.Endpoint.State, r.Endpoint.RemovedAt = EndpointRemoved, &at
		}
		if v.Endpoint.State == devicemanager.EndpointStopped {
			at := v.Endpoint.StoppedAt.UTC()
			r.Endpoint.StoppedAt = &at
			r.Endpoint.GraceRemainingMs = v.Endpoint.GraceRemaining.Milliseconds()
			r.Endpoint.Restored = v.Endpoint.Socket == ""
		}
		for _, d := range v.Devices {
			pd := PageDevice{ID: d.ID, Health: d.Health, NUMANodes: d.NUMANodes, Reserved: d.Reserved}
			for _, h := range d.Holders {
				pod := names[types.UID(h.PodUID)]
				if pod == "" {
					pod = h.PodUID
				}
				pd.Holders = append(pd.Holders, PageHolder{Pod: pod, Container: h.ContainerName})
			}
			if v.Endpoint.State == devicemanager.EndpointRunning && d.Health == devicemanager.DeviceHealthy && len(d.Holders) == 0 && !d.Reserved {
				r.Free++
			}
			r.Devices = append(r.Devices, pd)
		}
		out = append(out, r)
	}
	for name, at := range gone {
		if listed[name] {
			continue
		}
		at := at.UTC()
		out = append(out, PageResource{Name: name, Devices: []PageDevice{},
			Endpoint: PageEndpoint{State: EndpointRemoved, RemovedAt: &at}})
	}
	return out
}

// PagePodOf converts a pod's result for the page; waiting is what the pod waits for, shown
// while its phase is Pending.
func PagePodOf(r *podresult.PodResult, waiting *PageWait) PagePod {
	p := PagePod{Namespace: r.Namespace, Name: r.Name, UID: r.UID, Phase: r.Phase, Reason: r.Reason,
		Message: r.Message, Warning: joinWarnings(r.Warning, r.ConflictWarning()), Updated: r.Updated}
	if r.Phase == podresult.PhasePending {
		p.Waiting = waiting
	}
	if r.Runtime != nil && r.Runtime.ContainersRun {
		p.RuntimePhase = string(r.Runtime.Phase)
	}
	p.Terminating = r.Terminating
	for _, c := range r.Containers {
		pc := PageContainer{Name: c.Name, Init: c.Init, Sidecar: c.Sidecar}
		if devs := c.Devices(); len(devs) > 0 {
			pc.Devices = devs
		}
		pc.Unhealthy = c.UnhealthyDevices()
		if cs, ok := r.Runtime.ContainerStatus(c.Name, c.Init); ok {
			pc.State, pc.RestartCount = containerStateText(cs.State), cs.RestartCount
		}
		p.Containers = append(p.Containers, pc)
	}
	return p
}

// quantity is the resource's value in list, 0 if absent.
func quantity(list v1.ResourceList, name string) int64 {
	q, ok := list[v1.ResourceName(name)]
	if !ok {
		return 0
	}
	return q.Value()
}

// joinWarnings joins the non-empty warnings into one text.
func joinWarnings(ws ...string) string {
	return strings.Join(slices.DeleteFunc(ws, func(w string) bool { return w == "" }), " ")
}

// containerStateText is a container state in a few words: "running", "waiting:
// ContainerCreating", "exited 0 (Completed)".
func containerStateText(st v1.ContainerState) string {
	switch {
	case st.Running != nil:
		return "running"
	case st.Terminated != nil:
		text := fmt.Sprintf("exited %d", st.Terminated.ExitCode)
		if st.Terminated.Reason != "" {
			text += " (" + st.Terminated.Reason + ")"
		}
		return text
	case st.Waiting != nil && st.Waiting.Reason != "":
		return "waiting: " + st.Waiting.Reason
	default:
		return "waiting"
	}
}

// pageHandlers registers the status page on mux: / (the page), /ui/ (its assets),
// /api/state (the Source's PageState as JSON) and /api/stream (PageState as server-sent events, from
// streams, whose run the caller owns).
func pageHandlers(mux *http.ServeMux, src Source, streams *stateStreams) error {
	assets, err := fs.Sub(pageFiles, "page")
	if err != nil {
		return fmt.Errorf("status page assets: %w", err)
	}
	index, err := fs.ReadFile(assets, "index.html")
	if err != nil {
		return fmt.Errorf("status page assets: %w", err)
	}
	head, tail, ok := strings.Cut(string(index), initialStateMark)
	if !ok {
		return fmt.Errorf("status page assets: index.html lacks %s", initialStateMark)
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		pageHeaders(w, "text/html; charset=utf-8")
		_, _ = w.Write(withInitialState(head, tail, src.PageState()))
	})
	files := http.StripPrefix("/ui/", http.FileServerFS(assets))
	mux.HandleFunc("GET /ui/", func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w, "")
		files.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, _ *http.Request) {
		pageHeaders(w, "application/json")
		_ = json.NewEncoder(w).Encode(src.PageState())
	})
	mux.HandleFunc("GET /api/stream", streams.serve)
	return nil
}

// initialStateMark is where the page's HTML takes the state it first shows.
const initialStateMark = "<!--kdm:initial-state-->"

// withInitialState is the page with st in it, as a JSON data block (<script
// type="application/json" id="initial-state">) that app.js renders before the page is first
// painted: the first paint shows the node, never a placeholder waiting for /api/stream. The
// content security policy lets no inline script run; a data block is not run, only read.
// json.Encoder escapes <, > and &, so no name in the state can end the block.
func withInitialState(head, tail string, st PageState) []byte {
	var b bytes.Buffer
	b.WriteString(head)
	b.WriteString(`<script type="application/json" id="initial-state">`)
	if err := json.NewEncoder(&b).Encode(st); err != nil {
		b.WriteString("null") // the page then waits for the stream
	}
	b.WriteString("</script>")
	b.WriteString(tail)
	return b.Bytes()
}

// pageHeaders keeps the page to its own assets and out of caches.
func pageHeaders(w http.ResponseWriter, contentType string) {
	h := w.Header()
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
}

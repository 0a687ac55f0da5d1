package explore

import (
	"fmt"
	"hash/fnv"
	"io"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kdm-project/kdm/internal/state"
)

// fingerprint hashes everything that decides what the world does next and what the
// invariants see, so that an exhaustive walk can leave a state it has already explored.
// extra is the walk's own position (the next story event, whether it crashed already).
func (w *world) fingerprint(extra string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s now=%d started=%d ready=%v reboot=%v current=%v disk=%x tampered=%v\n", extra,
		w.now.UnixNano(), w.startedAt.UnixNano(), w.sourcesReady, w.rebooted, w.current, w.file(), w.diskTampered)
	w.st.Describe(h)
	for _, name := range state.SortedKeys(w.plugins) {
		p := w.plugins[name]
		fmt.Fprintf(h, "plugin %s alive=%v instance=%d open=%v sockets=%d listed=%v added=%d faults=%v devices=", name, p.alive, p.instance, p.open, p.sockets, p.listed, p.added, p.faults)
		for _, d := range p.devices {
			fmt.Fprintf(h, "%s:%s,", d.ID, d.Health)
		}
		fmt.Fprintln(h)
	}
	for _, name := range w.order {
		p := w.pods[name]
		fmt.Fprintf(h, "pod %s %v running=%v completed=%v before=%v now=%v reason=%q given=%v records=%d\n", name, p.phase, p.running, p.completed,
			p.admittedGen != 0 && p.admittedGen < w.gen, p.admittedGen == w.gen, p.reason, p.given, len(p.records))
		for _, r := range p.records {
			fmt.Fprintf(h, " %s/%s/%s %v\n", r.PodUID, r.ContainerName, r.ResourceName, r.DeviceIDs)
		}
	}
	for _, a := range w.admissions {
		fmt.Fprintf(h, "admission %s readmit=%v %d steps=%v wait=%d %s %d deferral=%v picks=", a.pod.name, a.readmit,
			a.ci, a.steps, a.wait, a.waitRes, a.waitUntil.UnixNano(), a.deferral)
		for _, pk := range a.picks() {
			fmt.Fprintf(h, "%s:%v:%v:%s;", pk.Resource, sets.List(pk.IDs), pk.Devices, respFingerprint(pk.Response))
		}
		fmt.Fprintln(h)
	}
	for _, t := range w.tasks {
		fmt.Fprintf(h, "task %s %d\n", t.id(), t.instance)
	}
	for _, r := range w.rejections {
		fmt.Fprintf(h, "rejected %+v\n", r)
	}
	if w.late != nil {
		io.WriteString(h, w.late.Error())
	}
	return h.Sum64()
}

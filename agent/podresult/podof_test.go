package podresult

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// TestPodOfRebuildsContainers: a pod known only from its result (removed while kdm was down)
// is rebuilt with its containers' names, init containers and sidecars as such, and its grace
// period, so that podresources lists the devices it still holds while it stops.
func TestPodOfRebuildsContainers(t *testing.T) {
	grace := int64(45)
	r := &PodResult{Namespace: "ns", Name: "p", UID: "u1", Phase: PhaseAdmitted,
		Containers:  []ContainerResult{{Name: "setup", Init: true}, {Name: "proxy", Init: true, Sidecar: true}, {Name: "main"}},
		Terminating: &Termination{GracePeriodSeconds: &grace}}
	p := PodOf(r)
	if p.Namespace != "ns" || p.Name != "p" || p.UID != "u1" {
		t.Fatalf("PodOf identity: %s/%s %s", p.Namespace, p.Name, p.UID)
	}
	if len(p.Spec.InitContainers) != 2 || p.Spec.InitContainers[0].Name != "setup" || p.Spec.InitContainers[0].RestartPolicy != nil ||
		p.Spec.InitContainers[1].Name != "proxy" || p.Spec.InitContainers[1].RestartPolicy == nil ||
		*p.Spec.InitContainers[1].RestartPolicy != v1.ContainerRestartPolicyAlways {
		t.Errorf("init containers %+v; want setup, then the sidecar proxy", p.Spec.InitContainers)
	}
	if len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Name != "main" {
		t.Errorf("containers %+v; want main", p.Spec.Containers)
	}
	if g := p.Spec.TerminationGracePeriodSeconds; g == nil || *g != 45 {
		t.Errorf("grace period %v; want 45 from the Terminating mark", g)
	}
	if g := PodOf(&PodResult{UID: "u2"}).Spec.TerminationGracePeriodSeconds; g != nil {
		t.Errorf("grace period %d for a pod without a Terminating mark; want none", *g)
	}
}

// TestTerminatingJSON: the Terminating mark is the documented terminating object, read back
// as written, and absent for a pod that is not stopping.
func TestTerminatingJSON(t *testing.T) {
	grace := int64(30)
	since := time.Date(2026, 12, 2, 3, 4, 5, 0, time.UTC)
	r := PodResult{Namespace: "ns", Name: "p", UID: "u1", Phase: PhaseAdmitted,
		Terminating: &Termination{Since: since, GracePeriodSeconds: &grace}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"terminating":{"since":"2026-12-02T03:04:05Z","gracePeriodSeconds":30}`; !strings.Contains(string(b), want) {
		t.Errorf("JSON %s; want it to contain %s", b, want)
	}
	var back PodResult
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Terminating == nil || !back.Terminating.Since.Equal(since) || *back.Terminating.GracePeriodSeconds != 30 {
		t.Errorf("read back %+v", back.Terminating)
	}
	r.Terminating = nil
	if b, _ := json.Marshal(r); strings.Contains(string(b), "terminating") {
		t.Errorf("JSON of a pod that is not stopping: %s", b)
	}
}

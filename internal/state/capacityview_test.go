package state

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestCapacityViewFollowsEveryChange drives a state through random registrations, device
// lists, disconnections, restores, capacity checks that remove resources and forgets, and
// after every step compares the published view with what Capacity reports from the
// state itself: the lock-free readers must never see counts the state no longer has.
func TestCapacityViewFollowsEveryChange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := New(Options{})
	start := time.Unix(1000, 0)
	now := start
	const grace = 5 * time.Minute
	resources := []string{"a.com/x", "b.com/y", "c.com/z"}
	for step := range 5000 {
		res := resources[rng.IntN(len(resources))]
		var op string
		switch rng.IntN(7) {
		case 0:
			op = "connect"
			s.Connect(res)
		case 1:
			op = "disconnect"
			s.Disconnect(res, now)
		case 2:
			op = "restore"
			s.AddRestored(res, now)
		case 3, 4:
			op = "list"
			var devs []*pluginapi.Device
			for i := range rng.IntN(6) {
				health := pluginapi.Healthy
				if rng.IntN(3) == 0 {
					health = pluginapi.Unhealthy
				}
				devs = append(devs, &pluginapi.Device{ID: fmt.Sprintf("d%d", i), Health: health})
			}
			s.ApplyDeviceList(res, devs)
		case 5:
			op = "capacity"
			now = now.Add(time.Duration(rng.IntN(4)) * time.Minute)
			s.Capacity(now, grace, nil)
		case 6:
			op = "forget"
			s.Forget(res)
		}
		got := describeView(s.CapacityView())
		var want CapacityView
		for name, r := range s.resources {
			if r.hasSets() {
				want = append(want, ResourceCapacity{Name: name, Counts: Counts{Capacity: int64(r.healthy.Len() + r.unhealthy.Len()), Allocatable: int64(r.healthy.Len())}, Connected: r.connected, StoppedAt: r.stoppedAt})
			}
		}
		if w := describeView(want); got != w {
			t.Fatalf("step %d (%s %s): view\n%s\nwant\n%s", step, op, res, got, w)
		}
		if exp, want := s.CapacityView().Expired(now, grace), anyExpired(s, now, grace); exp != want {
			t.Fatalf("step %d: Expired = %v, state says %v", step, exp, want)
		}
	}
}

func anyExpired(s *State, now time.Time, grace time.Duration) bool {
	for _, r := range s.resources {
		if r.hasSets() && r.gracePeriodExpired(now, grace) {
			return true
		}
	}
	return false
}

func describeView(v CapacityView) string {
	lines := make([]string, 0, len(v))
	for _, r := range v {
		lines = append(lines, fmt.Sprintf("%s %d/%d connected=%v stopped=%d", r.Name, r.Capacity, r.Allocatable, r.Connected, r.StoppedAt.Unix()))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

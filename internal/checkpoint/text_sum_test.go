package checkpoint

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// checkTextSum checks that sum gives fnv(h, text) for every low byte, with random high bits.
func checkTextSum(t *testing.T, sum *textSum, text []byte, rng *rand.Rand) {
	t.Helper()
	if want := pow32(fnvPrime32, len(text)); sum.mul != want {
		t.Fatalf("text %.60q...: mul %#x, want %#x", text, sum.mul, want)
	}
	for l := range uint32(256) {
		h := rng.Uint32()&^0xff | l
		if got, want := sum.apply(h), fnv1a(h, text); got != want {
			t.Fatalf("text %.60q... after state %#x: %#x, want %#x (%d terms)", text, h, got, want, len(sum.add))
		}
	}
}

// checkEntrySum checks entrySum(e) against plain FNV-1a over e's text.
func checkEntrySum(t *testing.T, e *PodDevicesEntry, rng *rand.Rand) *textSum {
	t.Helper()
	sum := entrySum(e)
	checkTextSum(t, sum, entryText(e), rng)
	return sum
}

func TestLaneSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, text := range []string{"x", "0", "1 2 3", strings.Repeat("12 ", 40), "ü", "GPU-ü" + strings.Repeat(" 255", 30) + "]}"} {
		b := []byte(text)
		checkTextSum(t, laneSum(b, lanesFor(b)), b, rng)
	}
}

func TestEntrySum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, e := range benchData(t, 3).PodDeviceEntries {
		if sum := checkEntrySum(t, &e, rng); len(sum.add) != 128 {
			t.Errorf("an ASCII entry has %d terms, want 128", len(sum.add))
		}
	}
	for _, e := range []PodDevicesEntry{
		{},
		{PodUID: "u", ContainerName: "c", ResourceName: "r", DeviceIDs: DevicesPerNUMA{}, AllocResp: []byte{}},
		{PodUID: "u", AllocResp: []byte{7}},
		{PodUID: "u", AllocResp: []byte{0, 255}},
		{PodUID: "pod-ü", ContainerName: "ctr", ResourceName: "example.com/dev", DeviceIDs: DevicesPerNUMA{-1: {"a"}, 3: nil, 0: {}}, AllocResp: []byte{1, 2, 3, 200}},
		{PodUID: strings.Repeat("x", 500), DeviceIDs: DevicesPerNUMA{0: {"\xff\x00"}}, AllocResp: make([]byte, 700)},
	} {
		sum := checkEntrySum(t, &e, rng)
		if strings.Contains(e.PodUID, "ü") && len(sum.add) != 256 {
			t.Errorf("an entry with bytes of 0x80 or more has %d terms, want 256", len(sum.add))
		}
	}
}

func FuzzEntrySum(f *testing.F) {
	f.Add("6f1c2b7e", "cuda", "nvidia.com/gpu", "GPU-1", int64(0), []byte{10, 4, 8, 200}, uint64(1))
	f.Add("ü", "", "", "", int64(-1), []byte(nil), uint64(2))
	f.Fuzz(func(t *testing.T, uid, ctr, res, dev string, numa int64, alloc []byte, seed uint64) {
		e := PodDevicesEntry{PodUID: uid, ContainerName: ctr, ResourceName: res, AllocResp: alloc}
		if dev != "" {
			e.DeviceIDs = DevicesPerNUMA{numa: {dev, dev + "x"}}
		}
		rng := rand.New(rand.NewPCG(seed, 3))
		checkEntrySum(t, &e, rng)
		text := entryText(&e)
		checkTextSum(t, laneSum(text, lanesFor(text)), text, rng)
	})
}

// BenchmarkTextSum compares building an entry's textSum with one pass of the checksum over
// it: the price of the terms in passes (wholeCostPasses).
func BenchmarkTextSum(b *testing.B) {
	e := benchData(b, 1).PodDeviceEntries[0]
	b.Run("build", func(b *testing.B) {
		for b.Loop() {
			entrySum(&e)
		}
	})
	b.Run("pass", func(b *testing.B) {
		s := newHasher(false)
		for b.Loop() {
			s.entry(&e)
		}
	})
}

// TestChecksumPreparedChurn runs a file of entries through the changes a node sees (pods
// leave from the start, the middle and the end, arrive at the end and in the middle, the same
// entries come back) and checks every write's checksum against Checksum of the same Data: the
// memos, the entries' textSums and the runs' must give exactly the kubelet's checksum. It
// also checks that the textSums and runs were used, so that the comparison covers them, and
// that the fast-path switch turns them off.
func TestChecksumPreparedChurn(t *testing.T) {
	t.Run("fast", func(t *testing.T) { checksumChurn(t, true) })
	t.Run("whole off", func(t *testing.T) {
		defer func(off uint32) { fastPathsOff = off }(fastPathsOff)
		fastPathsOff |= offWhole
		checksumChurn(t, false)
	})
}

// checksumChurn is TestChecksumPreparedChurn with textSums on (wholeOn) or off.
func checksumChurn(t *testing.T, wholeOn bool) {
	const n = 600
	d := benchData(t, n+400)
	pool := make([]*Entry, len(d.PodDeviceEntries))
	for i, e := range d.PodDeviceEntries {
		pool[i] = NewEntry(e)
	}
	live := slices.Clone(pool[:n])
	next := n
	reg := []*Registered{NewRegistered("nvidia.com/gpu", []string{"a", "b"})}
	rng := rand.New(rand.NewPCG(5, 6))
	check := func(step string) {
		t.Helper()
		p := &Prepared{Entries: live, Registered: reg}
		if got, want := checksumPrepared(live, false, reg, nil), Checksum(p.Data()); got != want {
			t.Fatalf("%s: checksum %d, want %d", step, got, want)
		}
	}
	check("first")
	for op := 0; op < 300; op++ {
		switch op % 5 {
		case 0, 1: // the oldest leaves, a new one arrives
			live = append(live[1:], pool[next%len(pool)])
			next++
		case 2: // one at random leaves
			i := rng.IntN(len(live))
			live = slices.Delete(live, i, i+1)
		case 3: // one arrives in the middle
			i := rng.IntN(len(live))
			live = slices.Insert(live, i, pool[next%len(pool)])
			next++
		case 4: // the newest leaves
			live = live[:len(live)-1]
		}
		if slices.ContainsFunc(live[:len(live)-1], func(e *Entry) bool { return e == live[len(live)-1] }) {
			live = live[:len(live)-1] // an entry appears once in a file
		}
		check(fmt.Sprintf("op %d", op))
	}
	wholes, runs := 0, 0
	for _, e := range live {
		if e.sum.whole.Load() != nil {
			wholes++
		}
		if e.run.Load() != nil {
			runs++
		}
	}
	switch {
	case wholeOn && (wholes < len(live)/2 || runs == 0):
		t.Fatalf("%d of %d entries have a textSum and %d runs are composed: the churn did not exercise them", wholes, len(live), runs)
	case !wholeOn && wholes+runs > 0:
		t.Fatalf("with the whole fast path off, %d entries have a textSum and %d runs are composed", wholes, runs)
	}
}

// TestWideRegisteredFillsByGroups: a large registered list after entries that change at
// every write follows a new state each time; its part of the checksum must stay exact while
// its table fills eight low bytes per pass, and the table must end full well within 256
// passes.
func TestWideRegisteredFillsByGroups(t *testing.T) {
	ids := make([]string, 2000)
	for i := range ids {
		ids[i] = fmt.Sprintf("GPU-%08x-4b1e-9d7a-%012d", i, i)
	}
	reg := []*Registered{NewRegistered("example.com/big", ids)}
	if len(reg[0].encoded().json) < wideSumBytes {
		t.Fatalf("the list's JSON is %d bytes, under wideSumBytes", len(reg[0].encoded().json))
	}
	d := benchData(t, 400)
	for w := 0; w < 400; w++ {
		e := NewEntry(d.PodDeviceEntries[w])
		p := &Prepared{Entries: []*Entry{e}, Registered: reg}
		if got, want := checksumPrepared(p.Entries, false, reg, nil), Checksum(p.Data()); got != want {
			t.Fatalf("write %d: checksum %d, want %d", w, got, want)
		}
	}
	tab := reg[0].sum.wide.Load()
	if tab == nil {
		t.Fatal("the large list got no table")
	}
	known := 0
	for l := range 256 {
		if _, ok := tab.get(uint8(l)); ok {
			known++
		}
	}
	if known != 256 {
		t.Fatalf("after 400 writes after new states the table knows %d low bytes, want 256", known)
	}
}

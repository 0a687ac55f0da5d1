package checkpoint

import (
	"math/rand/v2"
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
// it: the price of the terms in passes.
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

// TestApplyPiece hashes an entry and a registered pair after many random states, so that each
// goes from its memo to its whole textSum or its table filled by groups, and checks every
// result against hashing the text.
func TestApplyPiece(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = "dev-" + strings.Repeat("x", i%7)
	}
	e := benchData(t, 1).PodDeviceEntries[0]
	for _, p := range []piece{NewEntry(e), NewRegistered("example.com/dev", ids), NewRegistered("ü", []string{"a"})} {
		for i := range 300 {
			h := rng.Uint32()
			want := hasher{t: hashTablesOnce(), h: h}
			p.hashInto(&want)
			if got := applyPiece(h, p); got != want.h {
				t.Fatalf("%T, state %d (%#x): %#x, want %#x", p, i, h, got, want.h)
			}
		}
		if c := p.sum(); c.whole.Load() == nil && c.table.Load() == nil {
			t.Errorf("%T: hashed after 300 states, it has neither a textSum nor a table", p)
		}
	}
}

package checkpoint

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// spliced returns the text of ids spliced from the pair of prevIDs (nil when the splice
// declines), and the text NewRegistered gives.
func spliced(prevIDs, ids []string) (got, want *cachedText) {
	prev := NewRegistered("example.com/gpu", prevIDs)
	prev.encoded()
	return spliceRegistered(NewRegistered("example.com/gpu", ids), prev), NewRegistered("example.com/gpu", ids).encoded()
}

func sameText(a, b *cachedText) bool {
	return bytes.Equal(a.json, b.json) && a.bad == b.bad && a.badUTF8 == b.badUTF8
}

// TestRegisteredSplice: a pair spliced from an earlier one has exactly the text encoded
// afresh, for sorted lists edited at random (IDs removed and added, also ones that need
// escaping or are not valid UTF-8), for unsorted and repeated IDs, and for empty and nil
// lists on either side.
func TestRegisteredSplice(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	id := func(odd int) string { // one in odd needs escaping or is not valid UTF-8
		switch rng.IntN(odd) {
		case 0:
			return fmt.Sprintf("dev<%d>", rng.IntN(100)) // escaped
		case 1:
			return fmt.Sprintf("dev-\xff%d", rng.IntN(100)) // not valid UTF-8
		case 2:
			return fmt.Sprintf("dev-ü%d", rng.IntN(100)) // not ASCII, written as it is
		default:
			return fmt.Sprintf("GPU-%04d", rng.IntN(500))
		}
	}
	declined := 0
	for seed := range 3000 {
		prev := make([]string, rng.IntN(60))
		for i := range prev {
			prev[i] = id(400)
		}
		sorted := rng.IntN(4) > 0
		if sorted {
			slices.Sort(prev)
			prev = slices.Compact(prev)
		}
		// The next list shares prev's strings, as the state's lists do.
		var ids []string
		for _, p := range prev {
			if rng.IntN(8) > 0 {
				ids = append(ids, p)
			}
		}
		for range rng.IntN(4) {
			ids = append(ids, id(6))
		}
		if sorted {
			slices.Sort(ids)
		}
		switch rng.IntN(20) {
		case 0:
			ids = nil
		case 1:
			prev = nil
		case 2:
			ids = []string{}
		}
		got, want := spliced(prev, ids)
		if got == nil {
			if prevText := NewRegistered("example.com/gpu", prev).encoded(); prev != nil && ids != nil && !prevText.bad &&
				!bytes.ContainsAny(prevText.json, "\\") && !bytes.ContainsRune(prevText.json, '\ufffd') {
				t.Fatalf("seed %d: prev %q is plain, yet the splice declined", seed, prev)
			}
			declined++
			continue
		}
		if !sameText(got, want) {
			t.Fatalf("seed %d: prev %q, ids %q:\nspliced %s (bad %v %q)\nencoded %s (bad %v %q)",
				seed, prev, ids, got.json, got.bad, got.badUTF8, want.json, want.bad, want.badUTF8)
		}
	}
	if declined > 1500 {
		t.Errorf("the splice declined %d of 3000 lists", declined)
	}
}

// TestRegisteredSpliceCopies: NewRegisteredFrom splices on first encoding and then lets go
// of the pair it was made from; an ID is copied only where it is equal, not where it has the
// same length; and a pair whose text was never computed is not linked to, so no chain of
// earlier pairs builds up.
func TestRegisteredSpliceCopies(t *testing.T) {
	prev := NewRegistered("r", []string{"a1", "a2", "a3", "a4"})
	prev.encoded()
	// The second ID is a different string of the same length: a splice that trusts
	// lengths alone, without comparing IDs, would copy "a2".
	r := NewRegisteredFrom("r", []string{"a1", "b2", "a3", "a4"}, prev)
	if got := string(r.encoded().json); got != `"r":["a1","b2","a3","a4"]` {
		t.Fatalf("spliced %s", got)
	}
	if r.from.Load() != nil {
		t.Fatalf("the spliced pair still holds the one it was made from")
	}
	// prev not yet encoded: no link, no chain of earlier pairs.
	fresh := NewRegistered("r", []string{"x"})
	if NewRegisteredFrom("r", []string{"x", "y"}, fresh).from.Load() != nil {
		t.Fatalf("a pair links to one whose text was never computed")
	}
}

// FuzzRegisteredSplice: for any two lists (split from the input at NUL bytes, the second half
// after a 0xfe byte), the spliced text is the text encoded afresh.
func FuzzRegisteredSplice(f *testing.F) {
	f.Add([]byte("a\x00b\x00c\xfeb\x00c\x00d"))
	f.Add([]byte("<\x00&\xfe&"))
	f.Add([]byte("\xfe"))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b, _ := strings.Cut(string(in), "\xfe")
		prev, ids := strings.Split(a, "\x00"), strings.Split(b, "\x00")
		// Share strings between the lists where they are equal, as the state's lists do.
		for i, id := range ids {
			if k := slices.Index(prev, id); k >= 0 {
				ids[i] = prev[k]
			}
		}
		got, want := spliced(prev, ids)
		if got != nil && !sameText(got, want) {
			t.Fatalf("prev %q, ids %q: spliced %s, encoded %s", prev, ids, got.json, want.json)
		}
	})
}

// BenchmarkRegisteredFlip measures the text of a resource's registered devices after one of
// them turned unhealthy: spliced from the previous text (NewRegisteredFrom) and encoded
// afresh (NewRegistered).
func BenchmarkRegisteredFlip(b *testing.B) {
	for _, n := range []int{1000, 1_000_000} {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("GPU-%08x-4b1e-9d7a-%012x", i, i)
		}
		prev := NewRegistered("example.com/gpu", ids)
		prev.encoded()
		flipped := slices.Delete(slices.Clone(ids), n/2, n/2+1)
		for _, how := range []struct {
			name string
			make func() *Registered
		}{
			{"spliced", func() *Registered { return NewRegisteredFrom("example.com/gpu", flipped, prev) }},
			{"encoded", func() *Registered { return NewRegistered("example.com/gpu", flipped) }},
		} {
			b.Run(fmt.Sprintf("devices=%d/%s", n, how.name), func(b *testing.B) {
				b.SetBytes(int64(len(prev.encoded().json)))
				for b.Loop() {
					how.make().encoded()
				}
			})
		}
	}
}

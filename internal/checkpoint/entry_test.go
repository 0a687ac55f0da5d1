package checkpoint

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// prepare returns d as Prepared, one Entry per entry and one Registered per resource, in map
// order.
func prepare(d *Data) *Prepared {
	p := &Prepared{}
	if d.RegisteredDevices != nil {
		p.Registered = []*Registered{}
		for res, ids := range d.RegisteredDevices {
			p.Registered = append(p.Registered, NewRegistered(res, ids))
		}
	}
	if d.PodDeviceEntries != nil {
		p.Entries = make([]*Entry, 0, len(d.PodDeviceEntries))
		for _, e := range d.PodDeviceEntries {
			p.Entries = append(p.Entries, NewEntry(e))
		}
	}
	return p
}

// checkPreparedLikeEncode encodes p twice (cold and cached entries) and compares both with
// Encode of the same data.
func checkPreparedLikeEncode(t *testing.T, d *Data) {
	t.Helper()
	want, wantErr := Encode(d)
	p := prepare(d)
	for round := range 2 {
		got, err := EncodePrepared(p)
		if (err == nil) != (wantErr == nil) || (err != nil && !errors.Is(err, ErrInvalidUTF8)) {
			t.Fatalf("round %d: EncodePrepared err = %v, Encode err = %v", round, err, wantErr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: EncodePrepared differs from Encode\n got: %s\nwant: %s", round, got, want)
		}
	}
}

// FuzzEncodePrepared proves EncodePrepared byte-identical to Encode, whose own fuzz test ties
// it to encoding/json and the kubelet's checksum.
func FuzzEncodePrepared(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkPreparedLikeEncode(t, fuzzData(b)) })
}

func TestEncodePreparedShapes(t *testing.T) {
	for name, d := range map[string]*Data{
		"zero":           {},
		"empty":          {PodDeviceEntries: []PodDevicesEntry{}, RegisteredDevices: map[string][]string{}},
		"bench 10":       benchData(t, 10),
		"bench 300":      benchData(t, 300), // the checksum runs beside the JSON
		"bad entry":      {PodDeviceEntries: []PodDevicesEntry{{PodUID: "p\xff", AllocResp: []byte{}}}},
		"bad registered": {RegisteredDevices: map[string][]string{"r": {"bad\xfe"}}},
	} {
		t.Run(name, func(t *testing.T) { checkPreparedLikeEncode(t, d) })
	}
	if got, err := EncodePrepared(nil); err != nil || string(got) != specVectors[2].file {
		t.Errorf("EncodePrepared(nil) = %s, %v; want %s", got, err, specVectors[2].file)
	}
}

func TestPreparedGoldens(t *testing.T) {
	dirs, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, de := range dirs {
		raw, err := os.ReadFile(filepath.Join(goldenDir, de.Name(), FileName))
		if err != nil {
			continue
		}
		d, layout, err := Decode(raw)
		if err != nil || layout != LayoutV2 {
			continue
		}
		n++
		got, err := EncodePrepared(prepare(d))
		if err != nil {
			t.Fatalf("%s: %v", de.Name(), err)
		}
		if !bytes.Equal(got, raw) {
			t.Errorf("%s: EncodePrepared differs from the kubelet's file\n got: %s\nwant: %s", de.Name(), got, raw)
		}
	}
	if n == 0 {
		t.Fatal("no V2 golden checkpoint found")
	}
}

func TestPreparedData(t *testing.T) {
	d := benchData(t, 3)
	if got := prepare(d).Data(); !bytes.Equal(mustEncode(t, got), mustEncode(t, d)) {
		t.Error("Prepared.Data does not give back the data")
	}
	if got := (&Prepared{}).Data(); got.PodDeviceEntries != nil || got.RegisteredDevices != nil {
		t.Errorf("nil Entries and Registered gave %+v, want nil and nil", got)
	}
}

func mustEncode(t *testing.T, d *Data) []byte {
	t.Helper()
	b, err := Encode(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEntryTextLen checks the length formula against the text the hasher emits.
func TestEntryTextLen(t *testing.T) {
	var all []PodDevicesEntry
	for _, seed := range fuzzSeeds {
		all = append(all, fuzzData(seed).PodDeviceEntries...)
	}
	all = append(all, benchData(t, 3).PodDeviceEntries...)
	all = append(all, PodDevicesEntry{}, PodDevicesEntry{DeviceIDs: DevicesPerNUMA{}, AllocResp: []byte{}},
		PodDevicesEntry{DeviceIDs: DevicesPerNUMA{-1: nil, 12: {}, 3: {"a", "b"}}, AllocResp: []byte{0, 9, 10, 99, 100, 255}})
	for i := range all {
		s := newHasher(true)
		s.entry(&all[i])
		if got, want := entryTextLen(s.t, &all[i]), len(s.text); got != want {
			t.Errorf("entry %d (%+v): entryTextLen = %d, want %d (%q)", i, all[i], got, want, s.text)
		}
	}
}

// TestDecimalDigits checks the word-at-a-time digit count against the byte table: every byte
// value at every position of a word, and every tail length.
func TestDecimalDigits(t *testing.T) {
	naive := func(b []byte) int {
		n := 0
		for _, c := range b {
			n += int(byteDec[c].n)
		}
		return n
	}
	all := make([]byte, 256+7)
	for i := range 256 {
		all[i] = byte(i)
	}
	for start := range 8 {
		for end := start; end <= len(all); end++ {
			if got, want := decimalDigits(all[start:end]), naive(all[start:end]); got != want {
				t.Fatalf("decimalDigits(bytes %d to %d) = %d, want %d", start, end, got, want)
			}
		}
	}
}

// TestEntryChecksumMemo encodes lists that share entries and registered pairs, in the orders
// a state goes through (appends, inserts before, removals, a list seen again), and checks
// every file against Encode: a piece's remembered hash must be used only when still right.
func TestEntryChecksumMemo(t *testing.T) {
	d := benchData(t, 6)
	e := prepare(d).Entries
	lists := [][]*Entry{
		e[2:4], e[2:5], e[1:5], e[:5], e[1:5], {e[0], e[2], e[3]}, {e[2], e[3]}, e, {e[5], e[4], e[3]}, e,
	}
	r := []*Registered{NewRegistered("a.com/x", []string{"1"}), NewRegistered("b.com/y", []string{"2", "3"}),
		NewRegistered("c.com/z", nil), NewRegistered("d.com/w", []string{})}
	regs := [][]*Registered{r[1:3], r[1:3], r[:3], r, {r[3], r[0]}, r[2:], nil, {}}
	for i, l := range lists {
		p := &Prepared{Entries: l, Registered: regs[i%len(regs)]}
		got, err := EncodePrepared(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := mustEncode(t, p.Data()); !bytes.Equal(got, want) {
			t.Fatalf("list %d: EncodePrepared differs from Encode\n got: %s\nwant: %s", i, got[len(got)-30:], want[len(want)-30:])
		}
	}
}

// TestEncodePreparedAfterChanges encodes a large Prepared three ways: fresh, again (the memos
// answer) and after its first entry changed (every later entry follows a new state, so each
// fills its table). Each gives Encode's bytes.
func TestEncodePreparedAfterChanges(t *testing.T) {
	d := benchData(t, 1500)
	p := prepare(d)
	want := mustEncode(t, d)
	for _, round := range []string{"fresh", "memos"} {
		if got := mustEncodePrepared(t, p); !bytes.Equal(got, want) {
			t.Fatalf("%s: EncodePrepared differs from Encode", round)
		}
	}
	first := benchData(t, 1).PodDeviceEntries[0]
	first.PodUID = "000-first"
	p.Entries[0] = NewEntry(first)
	if got, want := mustEncodePrepared(t, p), mustEncode(t, p.Data()); !bytes.Equal(got, want) {
		t.Fatal("changed first entry: EncodePrepared differs from Encode")
	}
}

func mustEncodePrepared(t *testing.T, p *Prepared) []byte {
	t.Helper()
	b, err := EncodePrepared(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWritePrepared writes contents of several sizes through one Store (each reuses the
// previous one's write buffer) and reads each back: the file decodes to the content written
// and verifies; 1500 entries go through the buffer several times over.
func TestWritePrepared(t *testing.T) {
	s, err := NewStore(StoreConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*Data{benchData(t, 1500), benchData(t, 20), benchData(t, 2), {}} {
		if err := s.WritePrepared(prepare(d)); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(s.Path())
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := Decode(raw)
		if err != nil {
			t.Fatalf("file after WritePrepared of %d entries: %v", len(d.PodDeviceEntries), err)
		}
		if diff := cmp.Diff(d, got); diff != "" {
			t.Fatalf("file after WritePrepared of %d entries decodes to other data (-want +got):\n%s", len(d.PodDeviceEntries), diff)
		}
	}
	bad := &Data{PodDeviceEntries: []PodDevicesEntry{{PodUID: "p\xff"}}}
	if err := s.WritePrepared(prepare(bad)); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("WritePrepared of invalid UTF-8: err = %v, want ErrInvalidUTF8", err)
	}
	if err := s.WritePrepared(nil); err != nil {
		t.Errorf("WritePrepared(nil): %v", err)
	}
}

// TestLargeRegisteredPairRemembersEachLowByte: a large registered pair, written
// after entries that change, keeps its part of the checksum for every low byte of the state it
// followed, not only the last, so that a later write after any of them does not hash its text
// again; every file stays Encode's.
func TestLargeRegisteredPairRemembersEachLowByte(t *testing.T) {
	ids := make([]string, 3000)
	for i := range ids {
		ids[i] = "large-device-" + strconv.Itoa(i)
	}
	reg := NewRegistered("example.com/large", ids)
	// before is the state the pair follows in a file of entries and the pair alone.
	before := func(entries []*Entry) uint32 {
		s := newHasher(false)
		s.frag(s.t.head)
		s.entries(false, len(entries), func(i int) { s.entry(&entries[i].PodDevicesEntry) })
		s.frag(s.t.reg)
		s.frag(s.t.mapOpen)
		return s.h
	}
	seen := map[uint8]uint32{}
	for i := 0; len(seen) < 12; i++ {
		p := &Prepared{Entries: []*Entry{NewEntry(PodDevicesEntry{PodUID: "pod-" + strconv.Itoa(i), ContainerName: "app",
			ResourceName: "example.com/gpu", DeviceIDs: DevicesPerNUMA{0: {"gpu-0"}}, AllocResp: []byte{1, 2, 3}})}, Registered: []*Registered{reg}}
		got, err := EncodePrepared(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := encodeTB(t, p.Data()); !bytes.Equal(got, want) {
			t.Fatalf("write %d: EncodePrepared differs from Encode", i)
		}
		h := before(p.Entries)
		seen[uint8(h)] = h
	}
	for l, h := range seen {
		if !remembered(reg, h) {
			t.Errorf("the pair's part after low byte %#x was forgotten", l)
			continue
		}
		s := hasher{h: applyPiece(h, reg)}
		want := hasher{t: hashTablesOnce(), h: h}
		want.str(reg.Resource)
		want.char(':')
		want.strList(reg.IDs)
		if s.h != want.h {
			t.Errorf("after state %#x the remembered part gives %#x, hashing the text %#x", h, s.h, want.h)
		}
	}
}

// remembered reports whether p's part of the checksum after state h is known without hashing
// its text.
func remembered(p piece, h uint32) bool {
	c := p.sum()
	meta := c.meta.Load()
	if meta == 0 {
		return false
	}
	l := uint8(h & uint32(meta>>32))
	if memo := c.memo.Load(); memo&metaKnown != 0 && uint8(memo>>32) == l {
		return true
	}
	if t := c.table.Load(); t != nil {
		_, ok := t.get(l)
		return ok
	}
	return false
}

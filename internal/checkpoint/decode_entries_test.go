package checkpoint

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// TestDecodeEntriesRemembersCanonicalText checks what decodeEntries keeps of a file that Encode
// wrote: every entry's text and its part of the checksum, so that writing the same entries
// again neither encodes nor hashes them.
func TestDecodeEntriesRemembersCanonicalText(t *testing.T) {
	in := encodeTB(t, benchData(t, 40))
	_, entries, _, err := decodeEntries(bytes.Clone(in))
	if err != nil {
		t.Fatal(err)
	}
	s := newHasher(false)
	s.frag(s.t.head)
	s.char('[')
	for i, e := range entries {
		text := e.encoded()
		if !fromFile(text, e) {
			t.Fatalf("entry %d: its JSON was made again instead of taken from the file", i)
		}
		var w jsonWriter
		if want := w.entry(nil, &e.PodDevicesEntry); !bytes.Equal(text.json, want) {
			t.Fatalf("entry %d: kept text %q, Encode writes %q", i, text.json, want)
		}
		if i > 0 {
			s.char(' ')
		}
		// The remembered part takes the hash where hashing the entry's text takes it.
		before := s
		if !remembered(e, s.h) {
			t.Fatalf("entry %d: no checksum part remembered for the state it follows in the file", i)
		}
		s.h = applyPiece(s.h, e)
		before.entry(&e.PodDevicesEntry)
		if s.h != before.h {
			t.Fatalf("entry %d: the remembered part gives state %#x, hashing the entry %#x", i, s.h, before.h)
		}
	}
	checkDecodeEntries(t, in)
}

// TestDecodeEntriesNonCanonicalText checks that an entry whose text decodes to the right values
// but is not what Encode writes keeps no text, so that the next file is still byte for byte
// Encode's: one variant per way the fast parser's input may differ from Encode's output.
func TestDecodeEntriesNonCanonicalText(t *testing.T) {
	data := func(pod string) *Data {
		return &Data{
			PodDeviceEntries: []PodDevicesEntry{{
				PodUID: pod, ContainerName: "", ResourceName: "example.com/dev",
				DeviceIDs: DevicesPerNUMA{0: {"a"}, 1: {"b"}}, AllocResp: []byte("A"),
			}, {
				PodUID: "pod2", ContainerName: "c", ResourceName: "example.com/dev",
				DeviceIDs: DevicesPerNUMA{-1: {"c"}}, AllocResp: []byte("AB"),
			}},
			RegisteredDevices: map[string][]string{"example.com/dev": {"a", "b", "c"}},
		}
	}
	variants := []struct{ name, pod, old, new string }{
		{"whitespace", "pod1", `{"PodUID":"pod2"`, `{ "PodUID":"pod2"`},
		{"HTML characters unescaped", "pod<&>1", `pod\u003c\u0026\u003e1`, `pod<&>1`},
		{"stray bits in one-byte base64", "pod1", `"QQ=="`, `"QR=="`},
		{"stray bits in two-byte base64", "pod1", `"QUI="`, `"QUJ="`},
		{"NUMA keys out of order", "pod1", `{"0":["a"],"1":["b"]}`, `{"1":["b"],"0":["a"]}`},
		{"keys out of order", "pod1", `"ContainerName":"","ResourceName":"example.com/dev"`, `"ResourceName":"example.com/dev","ContainerName":""`},
		{"key missing", "pod1", `"ContainerName":"",`, ``},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			d := data(v.pod)
			canonical := string(encodeTB(t, d))
			if strings.Count(canonical, v.old) != 1 {
				t.Fatalf("%q is not once in %s", v.old, canonical)
			}
			in := []byte(strings.Replace(canonical, v.old, v.new, 1))
			got, entries, _, err := decodeEntries(bytes.Clone(in))
			if err != nil {
				t.Fatalf("the variant does not decode: %v\n%s", err, in)
			}
			if _, ok := parseV2Fast(in); !ok {
				t.Fatalf("the fast parser refused the variant, so nothing is tested:\n%s", in)
			}
			if !reflect.DeepEqual(got, d) {
				t.Fatalf("the variant decodes to %#v, want %#v", got, d)
			}
			kept := 0
			for _, e := range entries {
				if fromFile(e.encoded(), e) {
					kept++
				}
			}
			if kept != 1 {
				t.Fatalf("%d entries kept their text, want only the untouched one", kept)
			}
			checkDecodeEntries(t, in)
		})
	}
}

// fromFile reports whether t, e's JSON, is the text e was read from rather than a new encoding.
func fromFile(t *cachedText, e *Entry) bool {
	return len(t.json) > 0 && len(e.read) > 0 && &t.json[0] == &e.read[0]
}

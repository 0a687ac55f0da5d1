package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// goldenV2 lists the kubelet-written golden files in the V2 layout; each
// must take the fast path.
var goldenV2 = []string{
	"1pod-1ctr-1dev", "2pods-init-app-2res", "churn-gc", "corrupt-checksum", "empty",
	"large-100pods-4dev", "numa-2nodes", "registered-no-pods",
}

// fastHandled are hand-written inputs inside the fast parser's subset: the
// null, empty and extreme values whose meaning must match encoding/json.
var fastHandled = []struct{ name, in string }{
	{"empty object", `{}`},
	{"empty Data", `{"Data":{}}`},
	{"checksum only", `{"Checksum":0}`},
	{"largest checksum", `{"Data":{},"Checksum":18446744073709551615}`},
	{"null entries and devices", `{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":1}`},
	{"empty entries and devices", `{"Data":{"PodDeviceEntries":[],"RegisteredDevices":{}}}`},
	{"zero entry", `{"Data":{"PodDeviceEntries":[{}]}}`},
	{"null entry fields", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":null,"AllocResp":null}]}}`},
	{"empty entry fields", `{"Data":{"PodDeviceEntries":[{"PodUID":"","ContainerName":"","ResourceName":"","DeviceIDs":{},"AllocResp":""}]}}`},
	{"null and empty lists", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":null,"1":[]}}],"RegisteredDevices":{"a":null,"b":[],"":[""]}}}`},
	{"NUMA extremes", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"-1":["a"],"9223372036854775807":["b"],"-9223372036854775808":["c"],"10":["d"]}}]}}`},
	{"keys in any order", `{"Checksum":7,"Data":{"RegisteredDevices":{"r":["d"]},"PodDeviceEntries":[{"AllocResp":"AQID","DeviceIDs":{"0":["d"]},"ResourceName":"r","ContainerName":"c","PodUID":"p"}]}}`},
	{"whitespace everywhere", " \t\r\n{ \"Data\" :\n{ \"PodDeviceEntries\" : [ { \"PodUID\" : \"p\" , \"DeviceIDs\" : { \"0\" : [ \"a\" , \"b\" ] } , \"AllocResp\" : null } ] ,\r\n \"RegisteredDevices\" : { \"r\" : [ ] } } , \"Checksum\" : 12 } \n\t"},
	{"unicode and DEL", `{"Data":{"PodDeviceEntries":[{"PodUID":"é日本","ContainerName":"` + "\x7f\u2028\ufffd" + `","ResourceName":"<>&'/"}],"RegisteredDevices":{"é":["日本"]}}}`},
	{"repeated names", `{"Data":{"PodDeviceEntries":[{"PodUID":"p","ContainerName":"c","ResourceName":"r"},{"PodUID":"p","ContainerName":"c","ResourceName":"r"},{"PodUID":"q","ContainerName":"c","ResourceName":"s"}],"RegisteredDevices":{"r":[],"s":[]}}}`},
	{"base64 without padding need", `{"Data":{"PodDeviceEntries":[{"AllocResp":"AAAA"},{"AllocResp":"AA=="},{"AllocResp":"AAA="}]}}`},
}

// fastRefused are inputs the fast parser must leave to encoding/json: every
// kind of input outside its subset.
var fastRefused = []struct{ name, in string }{
	{"empty input", ``},
	{"whitespace only", ` `},
	{"top-level null", `null`},
	{"top-level array", `[]`},
	{"truncated", `{"Data":{"PodDeviceEntries":[{"PodUID":"p"`},
	{"trailing garbage", `{} x`},
	{"two objects", `{}{}`},
	{"trailing comma", `{"Data":{},}`},
	{"lower-case key", `{"data":{}}`},
	{"folded entry key", `{"Data":{"PodDeviceEntries":[{"poduid":"p"}]}}`},
	{"unknown top key", `{"Data":{},"Extra":1}`},
	{"unknown Data key", `{"Data":{"AllDevices":{}}}`},
	{"unknown entry key", `{"Data":{"PodDeviceEntries":[{"Pod":"p"}]}}`},
	{"duplicate Data", `{"Data":{},"Data":{}}`},
	{"duplicate Checksum", `{"Checksum":1,"Checksum":2}`},
	{"duplicate entries", `{"Data":{"PodDeviceEntries":[{}],"PodDeviceEntries":[]}}`},
	{"duplicate registered", `{"Data":{"RegisteredDevices":{"a":[]},"RegisteredDevices":{"b":[]}}}`},
	{"duplicate entry field", `{"Data":{"PodDeviceEntries":[{"PodUID":"a","PodUID":"b"}]}}`},
	{"duplicate AllocResp", `{"Data":{"PodDeviceEntries":[{"AllocResp":"","AllocResp":null}]}}`},
	{"duplicate NUMA key", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":["a"],"0":["b"]}}]}}`},
	{"duplicate registered key", `{"Data":{"RegisteredDevices":{"a":["x"],"a":null}}}`},
	{"escaped string", `{"Data":{"PodDeviceEntries":[{"PodUID":"a\u0041"}]}}`},
	{"escaped slash", `{"Data":{"RegisteredDevices":{"a\/b":[]}}}`},
	{"escaped key", `{"D\u0061ta":{}}`},
	{"invalid UTF-8", "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"\xff\"}]}}"},
	{"UTF-8 surrogate", "{\"Data\":{\"RegisteredDevices\":{\"a\":[\"\xed\xa0\x80\"]}}}"},
	{"raw control character", "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"a\tb\"}]}}"},
	{"NUMA key with plus", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"+1":[]}}]}}`},
	{"NUMA key with leading zero", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"01":[]}}]}}`},
	{"NUMA key minus zero", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"-0":[]}}]}}`},
	{"NUMA key minus only", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"-":[]}}]}}`},
	{"NUMA key empty", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"":[]}}]}}`},
	{"NUMA key above int64", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"9223372036854775808":[]}}]}}`},
	{"NUMA key below int64", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"-9223372036854775809":[]}}]}}`},
	{"NUMA key 20 digits", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"10000000000000000000":[]}}]}}`},
	{"NUMA key not a number", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"x":[]}}]}}`},
	{"NUMA key with space", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{" 1":[]}}]}}`},
	{"negative checksum", `{"Checksum":-1}`},
	{"fractional checksum", `{"Checksum":1.0}`},
	{"exponent checksum", `{"Checksum":1e3}`},
	{"checksum with leading zero", `{"Checksum":01}`},
	{"checksum above uint64", `{"Checksum":18446744073709551616}`},
	{"checksum far above uint64", `{"Checksum":99999999999999999999999}`},
	{"null checksum", `{"Checksum":null}`},
	{"string checksum", `{"Checksum":"1"}`},
	{"null Data", `{"Data":null}`},
	{"Data is an array", `{"Data":[]}`},
	{"V1 DeviceIDs list", `{"Data":{"PodDeviceEntries":[{"DeviceIDs":["a"]}]}}`},
	{"entries is an object", `{"Data":{"PodDeviceEntries":{}}}`},
	{"null entry", `{"Data":{"PodDeviceEntries":[null]}}`},
	{"registered is a list", `{"Data":{"RegisteredDevices":[]}}`},
	{"null PodUID", `{"Data":{"PodDeviceEntries":[{"PodUID":null}]}}`},
	{"numeric PodUID", `{"Data":{"PodDeviceEntries":[{"PodUID":1}]}}`},
	{"null device ID", `{"Data":{"RegisteredDevices":{"a":[null]}}}`},
	{"AllocResp as a byte array", `{"Data":{"PodDeviceEntries":[{"AllocResp":[1,2]}]}}`},
	{"AllocResp bad base64", `{"Data":{"PodDeviceEntries":[{"AllocResp":"!!"}]}}`},
	{"AllocResp missing padding", `{"Data":{"PodDeviceEntries":[{"AllocResp":"QQ"}]}}`},
	{"AllocResp escaped newline", `{"Data":{"PodDeviceEntries":[{"AllocResp":"AA\nAA"}]}}`},
	{"AllocResp raw newline", "{\"Data\":{\"PodDeviceEntries\":[{\"AllocResp\":\"AA\nAA\"}]}}"},
	{"nul literal", `{"Data":{"PodDeviceEntries":nul}}`},
	{"null with suffix", `{"Data":{"PodDeviceEntries":nullx}}`},
}

// encodeTB returns Encode(d) or fails the test.
func encodeTB(tb testing.TB, d *Data) []byte {
	tb.Helper()
	b, err := Encode(d)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// indent re-formats b with json.Indent, which changes only whitespace.
func indent(tb testing.TB, b []byte) []byte {
	tb.Helper()
	var out bytes.Buffer
	if err := json.Indent(&out, b, " ", "\t"); err != nil {
		tb.Fatal(err)
	}
	return out.Bytes()
}

// fastPathCorpus returns the inputs that must take the fast path, by name.
func fastPathCorpus(tb testing.TB) map[string][]byte {
	in := map[string][]byte{
		"Encode bench data":   encodeTB(tb, benchData(tb, 25)),
		"Encode zero Data":    encodeTB(tb, &Data{}),
		"Encode indented":     indent(tb, encodeTB(tb, benchData(tb, 3))),
		"golden indented":     indent(tb, readGolden(tb, "numa-2nodes")),
		"Encode empty values": encodeTB(tb, &Data{PodDeviceEntries: []PodDevicesEntry{{DeviceIDs: DevicesPerNUMA{-1: {}}, AllocResp: []byte{}}}, RegisteredDevices: map[string][]string{"": nil}}),
	}
	for _, name := range goldenV2 {
		in["golden "+name] = readGolden(tb, name)
	}
	for _, c := range fastHandled {
		in[c.name] = []byte(c.in)
	}
	return in
}

// TestFastDecodePath pins which inputs the fast parser handles, so that it
// cannot silently stop being used: the files Encode and the kubelet write,
// and the hand-written edge cases, all with encoding/json's result.
func TestFastDecodePath(t *testing.T) {
	for name, b := range fastPathCorpus(t) {
		t.Run(name, func(t *testing.T) {
			if _, ok := parseV2Fast(b); !ok {
				t.Fatalf("parseV2Fast refused:\n%s", b)
			}
			checkFastMatchesJSON(t, b)
		})
	}
}

// TestFastDecodeRefuses checks that input outside the fast parser's subset
// is left to encoding/json, so Decode's results and error texts are those
// of encoding/json.
func TestFastDecodeRefuses(t *testing.T) {
	for _, c := range fastRefused {
		t.Run(c.name, func(t *testing.T) {
			if f, ok := parseV2Fast([]byte(c.in)); ok {
				t.Fatalf("parseV2Fast handled %q: %+v", c.in, f)
			}
			checkFastMatchesJSON(t, []byte(c.in))
		})
	}
}

// TestFastDecodeErrorTexts checks that Decode's errors are still
// encoding/json's word for word where the fast parser refuses the input.
func TestFastDecodeErrorTexts(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"Data":null,"Checksum":-1}`, "json: cannot unmarshal number -1 into Go struct field fileV2.Checksum of type uint64"},
		{`{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"x":[]}}]}}`, "json: cannot unmarshal number x into Go struct field PodDevicesEntry.Data.PodDeviceEntries.DeviceIDs of type int64"},
		{`{"Data":{"PodDeviceEntries":[{"AllocResp":"!!"}]}}`, "illegal base64 data at input byte 0"},
		{`{"Data":{}} x`, "invalid character 'x' after top-level value"},
	}
	for _, c := range cases {
		_, _, err := Decode([]byte(c.in))
		if err == nil || !strings.HasSuffix(err.Error(), c.want) {
			t.Errorf("Decode(%s): err = %v, want it to end with %q", c.in, err, c.want)
		}
	}
}

// checkFastMatchesJSON asserts the fast parser's promise for b: when it
// handles b, encoding/json succeeds with a deeply equal file (AllocResp
// capacities included); and Decode and DecodeUnverified give what the
// encoding/json-only path gives, errors word for word.
func checkFastMatchesJSON(t *testing.T, b []byte) {
	t.Helper()
	want, wantErr := parseV2JSON(b)
	if got, ok := parseV2Fast(b); ok {
		if wantErr != nil {
			t.Fatalf("fast parser handled input encoding/json rejects (%v):\n%q", wantErr, b)
		}
		if !reflect.DeepEqual(got.Data, want.Data) || got.Checksum != want.Checksum {
			t.Fatalf("fast parser differs from encoding/json on %q:\n got  %#v\n want %#v", b, got, want)
		}
		for i := range got.Data.PodDeviceEntries {
			if g, w := cap(got.Data.PodDeviceEntries[i].AllocResp), cap(want.Data.PodDeviceEntries[i].AllocResp); g != w {
				t.Fatalf("entry %d: AllocResp capacity %d, encoding/json gives %d", i, g, w)
			}
		}
	}

	checkDecodeEntries(t, b)

	d, layout, err := Decode(b)
	wd, wlayout, werr := decode(b, parseV2JSON)
	if !reflect.DeepEqual(d, wd) || layout != wlayout || errText(err) != errText(werr) || !sameSentinels(err, werr) {
		t.Fatalf("Decode(%q) = %#v, %v, %v; encoding/json path gives %#v, %v, %v", b, d, layout, err, wd, wlayout, werr)
	}
	d, layout, sum, err := DecodeUnverified(b)
	wd, wlayout, wsum, werr := decodeUnverified(b, parseV2JSON)
	if !reflect.DeepEqual(d, wd) || layout != wlayout || sum != wsum || errText(err) != errText(werr) || !sameSentinels(err, werr) {
		t.Fatalf("DecodeUnverified(%q) = %#v, %v, %d, %v; encoding/json path gives %#v, %v, %d, %v",
			b, d, layout, sum, err, wd, wlayout, wsum, werr)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// sameSentinels reports whether a and b match the same sentinels and error
// types callers branch on.
func sameSentinels(a, b error) bool {
	var sa, sb *json.SyntaxError
	var ca, cb *ChecksumError
	return errors.Is(a, ErrNotJSON) == errors.Is(b, ErrNotJSON) &&
		errors.Is(a, ErrUnknownLayout) == errors.Is(b, ErrUnknownLayout) &&
		errors.Is(a, ErrCorrupt) == errors.Is(b, ErrCorrupt) &&
		errors.As(a, &sa) == errors.As(b, &sb) &&
		errors.As(a, &ca) == errors.As(b, &cb)
}

// FuzzFastDecodeMatchesEncodingJSON holds the fast parser to encoding/json:
// on the raw fuzz input, and on Encode's output (plain and re-indented) for
// Data built from the same bytes, which must take the fast path unless it
// holds an escaped string.
func FuzzFastDecodeMatchesEncodingJSON(f *testing.F) {
	for _, name := range append(goldenV2, "legacy-v1-shape", "legacy-v1-valid") {
		f.Add(readGolden(f, name))
	}
	for _, v := range specVectors {
		f.Add([]byte(v.file))
	}
	for _, c := range fastHandled {
		f.Add([]byte(c.in))
	}
	for _, c := range fastRefused {
		f.Add([]byte(c.in))
	}
	for _, s := range fuzzSeeds {
		f.Add(s)
		if enc, err := Encode(fuzzData(s)); err == nil {
			f.Add(enc)
		}
	}
	f.Add(encodeTB(f, benchData(f, 2)))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFastMatchesJSON(t, b)
		enc, err := Encode(fuzzData(b))
		if err != nil {
			return // invalid UTF-8: nothing to decode
		}
		for _, in := range [][]byte{enc, indent(t, enc)} {
			checkFastMatchesJSON(t, in)
			if _, ok := parseV2Fast(in); !ok && !bytes.Contains(in, []byte(`\`)) {
				t.Fatalf("fast parser refused canonical input without escapes:\n%s", in)
			}
		}
	})
}

// TestCanonicalInt64 checks the NUMA key parser against the decimal text of
// boundary values.
func TestCanonicalInt64(t *testing.T) {
	for _, v := range []int64{0, 1, -1, 9, 10, -10, 1 << 62, -1 << 63, 1<<63 - 1} {
		s := fmt.Sprint(v)
		if got, ok := canonicalInt64([]byte(s)); !ok || got != v {
			t.Errorf("canonicalInt64(%q) = %d, %v", s, got, ok)
		}
	}
}

// checkDecodeEntries checks decodeEntries against Decode on b: the same result, one Entry per
// entry holding it, and Entries whose remembered text and checksum parts give, written again
// in the same order, exactly the file Encode writes for the data.
func checkDecodeEntries(t *testing.T, b []byte) {
	t.Helper()
	in := bytes.Clone(b)
	want, wlayout, werr := Decode(b)
	d, entries, layout, err := decodeEntries(in)
	if !reflect.DeepEqual(d, want) || layout != wlayout || errText(err) != errText(werr) {
		t.Fatalf("decodeEntries(%q) = %#v, %v, %v; Decode gives %#v, %v, %v", b, d, layout, err, want, wlayout, werr)
	}
	if err != nil {
		return
	}
	if len(entries) != len(d.PodDeviceEntries) {
		t.Fatalf("decodeEntries(%q): %d Entries for %d entries", b, len(entries), len(d.PodDeviceEntries))
	}
	for i, e := range entries {
		if !reflect.DeepEqual(e.PodDevicesEntry, d.PodDeviceEntries[i]) {
			t.Fatalf("decodeEntries(%q): Entry %d holds %#v, the data %#v", b, i, e.PodDevicesEntry, d.PodDeviceEntries[i])
		}
	}
	wantFile, err := Encode(d)
	if err != nil {
		return
	}
	p := &Prepared{Entries: entries}
	if d.PodDeviceEntries == nil {
		p.Entries = nil
	}
	if d.RegisteredDevices != nil {
		p.Registered = []*Registered{}
		for res, ids := range d.RegisteredDevices {
			p.Registered = append(p.Registered, NewRegistered(res, ids))
		}
	}
	got, err := EncodePrepared(p)
	if err != nil || !bytes.Equal(got, wantFile) {
		t.Fatalf("the Entries of %q write %q, %v; Encode writes %q", b, got, err, wantFile)
	}
}

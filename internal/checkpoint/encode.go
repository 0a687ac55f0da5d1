package checkpoint

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Encode is checkpoint.Encode. d is only read, and must not be modified during the call.
// From parallelChecksumEntries entries on, the checksum is computed on a second goroutine
// while the JSON is made; it is joined before Encode returns.
func Encode(d *Data) ([]byte, error) {
	if d == nil {
		d = &Data{}
	}
	sum := make(chan uint32, 1)
	if len(d.PodDeviceEntries) >= parallelChecksumEntries {
		go func() { sum <- Checksum(d) }()
	} else {
		sum <- Checksum(d)
	}
	reg := sortedRegistered(d.RegisteredDevices)
	size := 4096
	for _, r := range reg {
		size += len(r.encoded().json) + 1
	}
	for i := range d.PodDeviceEntries {
		size += entrySize(&d.PodDeviceEntries[i])
	}
	var bad *cachedText // the first string that is not valid UTF-8, in the file's order
	b := append(make([]byte, 0, size), jsonFileHead...)
	if d.PodDeviceEntries == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range d.PodDeviceEntries {
			if i > 0 {
				b = append(b, ',')
			}
			var t *cachedText
			if b, t = appendEntryJSON(b, &d.PodDeviceEntries[i]); bad == nil {
				bad = t
			}
		}
		b = append(b, ']')
	}
	for _, r := range reg {
		if t := r.encoded(); t.bad && bad == nil {
			bad = t
		}
	}
	h := <-sum
	if bad != nil {
		return nil, fmt.Errorf("%w: %q", ErrInvalidUTF8, bad.badUTF8)
	}
	return appendChecksumTail(appendRegistered(b, d.RegisteredDevices == nil, reg), h), nil
}

// parallelChecksumEntries is the entry count from which Encode computes the checksum on a
// second goroutine.
const parallelChecksumEntries = 128

// sortedRegistered returns m's pairs as new Registered pieces sorted by resource, sharing
// m's lists; nil for a nil m.
func sortedRegistered(m map[string][]string) []*Registered {
	if m == nil {
		return nil
	}
	reg := make([]*Registered, 0, len(m))
	for res, ids := range m {
		reg = append(reg, NewRegistered(res, ids))
	}
	slices.SortFunc(reg, compareRegistered)
	return reg
}

// entryJSON returns e's JSON object as encoding/json writes it, or the first of its strings
// that is not valid UTF-8.
func entryJSON(e *PodDevicesEntry) *cachedText {
	b, bad := appendEntryJSON(make([]byte, 0, entrySize(e)), e)
	if bad != nil {
		return bad
	}
	return &cachedText{json: b}
}

// entrySize is about the size of e's JSON, seldom less.
func entrySize(e *PodDevicesEntry) int {
	n := 128 + len(e.PodUID) + len(e.ContainerName) + len(e.ResourceName) + base64.StdEncoding.EncodedLen(len(e.AllocResp))
	for _, ids := range e.DeviceIDs {
		n += 24
		for _, id := range ids {
			n += len(id) + 3
		}
	}
	return n
}

// appendEntryJSON appends e's JSON object as encoding/json writes it. If one of e's strings
// is not valid UTF-8 it appends nothing and returns that string as bad.
func appendEntryJSON(b []byte, e *PodDevicesEntry) (_ []byte, bad *cachedText) {
	for _, s := range []string{e.PodUID, e.ContainerName, e.ResourceName} {
		if !utf8.ValidString(s) {
			return b, &cachedText{badUTF8: s, bad: true}
		}
	}
	var keys [4]int64
	numa := keys[:0]
	for n, ids := range e.DeviceIDs {
		if s, ok := firstInvalid(ids); !ok {
			return b, &cachedText{badUTF8: s, bad: true}
		}
		numa = append(numa, n)
	}
	// encoding/json sorts map keys by their text: "-1" < "10" < "2".
	if len(numa) > 1 {
		slices.SortFunc(numa, func(a, b int64) int {
			return strings.Compare(strconv.FormatInt(a, 10), strconv.FormatInt(b, 10))
		})
	}
	b = append(b, `{"PodUID":`...)
	b = append(appendJSONString(b, e.PodUID), `,"ContainerName":`...)
	b = append(appendJSONString(b, e.ContainerName), `,"ResourceName":`...)
	b = append(appendJSONString(b, e.ResourceName), `,"DeviceIDs":`...)
	if e.DeviceIDs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		for i, n := range numa {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(strconv.AppendInt(append(b, '"'), n, 10), '"', ':')
			b = appendJSONList(b, e.DeviceIDs[n])
		}
		b = append(b, '}')
	}
	b = append(b, `,"AllocResp":`...)
	if e.AllocResp == nil {
		b = append(b, "null"...)
	} else {
		b = append(base64.StdEncoding.AppendEncode(append(b, '"'), e.AllocResp), '"')
	}
	return append(b, '}'), nil
}

// registeredJSON returns the pair's JSON text, "resource":[ids], as encoding/json writes it
// within the RegisteredDevices object, or the first of its strings that is not valid UTF-8.
func registeredJSON(resource string, ids []string) *cachedText {
	if !utf8.ValidString(resource) {
		return &cachedText{badUTF8: resource, bad: true}
	}
	if bad, ok := firstInvalid(ids); !ok {
		return &cachedText{badUTF8: bad, bad: true}
	}
	size := len(resource) + 8
	for _, id := range ids {
		size += len(id) + 3
	}
	b := appendJSONString(make([]byte, 0, size), resource)
	return &cachedText{json: appendJSONList(append(b, ':'), ids)}
}

// firstInvalid returns the first of l that is not valid UTF-8, and false, or true if none is.
func firstInvalid(l []string) (string, bool) {
	for _, s := range l {
		if !utf8.ValidString(s) {
			return s, false
		}
	}
	return "", true
}

// appendJSONList appends the list of valid UTF-8 strings l as encoding/json writes it.
func appendJSONList(b []byte, l []string) []byte {
	if l == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendJSONString appends the valid UTF-8 string s as encoding/json writes it: quoted as it
// is when it holds only printable ASCII other than the characters encoding/json escapes
// (" \ < > &), else by encoding/json itself. Device lists can hold a million IDs, and IDs
// and names are nearly always plain.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

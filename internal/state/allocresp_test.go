package state

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// allocRespSeeds are wire forms the check must agree with proto.Unmarshal on: real answers,
// and hand-made edge cases of the protobuf wire format.
func allocRespSeeds(t testing.TB) [][]byte {
	full, err := proto.Marshal(&pluginapi.ContainerAllocateResponse{
		Envs:        map[string]string{"VISIBLE": "0,1", "": ""},
		Annotations: map[string]string{"example.com/a": "b"},
		Mounts:      []*pluginapi.Mount{{ContainerPath: "/c", HostPath: "/h", ReadOnly: true}},
		Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/x", HostPath: "/dev/x", Permissions: "rw"}},
		CdiDevices:  []*pluginapi.CDIDevice{{Name: "example.com/gpu=0"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	bytesField := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(tag(num, protowire.BytesType), v)
	}
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	bad := []byte{0xff, 0xfe}
	return [][]byte{
		nil, {}, full, full[:len(full)-1],
		bytesField(1, bytesField(1, bad)),                                     // map key not UTF-8
		bytesField(4, bytesField(2, bad)),                                     // map value not UTF-8
		bytesField(1, bytesField(3, bad)),                                     // unknown map entry field
		bytesField(1, cat(tag(1, protowire.VarintType), []byte{1})),           // map key of another wire type
		bytesField(2, bytesField(1, bad)),                                     // mount path not UTF-8
		bytesField(2, cat(tag(3, protowire.VarintType), []byte{0x80, 0})),     // read_only, long varint
		bytesField(2, cat(tag(3, protowire.BytesType), []byte{1, 'x'})),       // read_only as bytes: unknown
		bytesField(3, bytesField(4, bad)),                                     // unknown DeviceSpec field
		bytesField(5, bytesField(1, []byte("ok"))),                            // CDI device
		bytesField(5, bytesField(1, bad)),                                     // CDI name not UTF-8
		cat(tag(1, protowire.VarintType), []byte{7}),                          // envs as varint: unknown
		cat(tag(9, protowire.StartGroupType), tag(9, protowire.EndGroupType)), // unknown group
		cat(tag(9, protowire.StartGroupType), tag(8, protowire.EndGroupType)), // mismatched group
		tag(2, protowire.EndGroupType),                                        // stray end group
		{0x00},                                                                // field number 0
		{0x0e, 0x00},                                                          // wire type 6
		bytesField(20000, bad),                                                // unknown field, any bytes
		{0x0a, 0x05, 0x0a},                                                    // length past the end
		bytesField(1, []byte{0x00}),                                           // map entry tag 0
	}
}

// FuzzValidAllocRespMatchesUnmarshal: the wire-form check accepts exactly what
// proto.Unmarshal accepts as a ContainerAllocateResponse.
func FuzzValidAllocRespMatchesUnmarshal(f *testing.F) {
	for _, s := range allocRespSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := proto.Unmarshal(b, &pluginapi.ContainerAllocateResponse{})
		if got := validAllocResp(b); got != (err == nil) {
			t.Fatalf("validAllocResp(%x) = %v, proto.Unmarshal error %v", b, got, err)
		}
	})
}

// TestValidAllocRespSeeds runs the seeds in every plain go test, with both answers shown, so
// the seeds keep covering valid and invalid forms.
func TestValidAllocRespSeeds(t *testing.T) {
	valid, invalid := 0, 0
	for _, b := range allocRespSeeds(t) {
		err := proto.Unmarshal(b, &pluginapi.ContainerAllocateResponse{})
		if got := validAllocResp(b); got != (err == nil) {
			t.Errorf("validAllocResp(%x) = %v, proto.Unmarshal error %v", b, got, err)
		}
		if err == nil {
			valid++
		} else {
			invalid++
		}
	}
	if valid < 5 || invalid < 5 {
		t.Fatalf("seeds: %d valid, %d invalid; want both kinds well covered", valid, invalid)
	}
}

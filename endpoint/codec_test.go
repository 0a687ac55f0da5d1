package endpoint

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func listMessage(t testing.TB, devs ...*pluginapi.Device) []byte {
	t.Helper()
	b, err := proto.Marshal(&pluginapi.ListAndWatchResponse{Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fastOrSlow decodes like the codec: the fast path, or proto.Unmarshal when it declines.
func fastOrSlow(b []byte) (*pluginapi.ListAndWatchResponse, error) {
	resp := &pluginapi.ListAndWatchResponse{}
	err := decodeListAndWatch(string(b), resp)
	if err == errSlowPath {
		resp = &pluginapi.ListAndWatchResponse{}
		err = proto.Unmarshal(b, resp)
	}
	return resp, err
}

// FuzzListAndWatchDecode: on any input the codec's decoding agrees with proto.Unmarshal: both
// fail, or both succeed with equal messages.
func FuzzListAndWatchDecode(f *testing.F) {
	f.Add(listMessage(f))
	f.Add(listMessage(f, &pluginapi.Device{ID: "gpu-0", Health: pluginapi.Healthy},
		&pluginapi.Device{ID: "a\x00b\n", Health: "Weird", Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: 0}, {ID: -1}, {ID: 1 << 40}}}}))
	// A device whose topology field appears twice (proto merges), an unknown field, and an
	// ID with invalid UTF-8.
	dev := protowire.AppendTag(nil, 3, protowire.BytesType)
	dev = protowire.AppendBytes(dev, protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 2)))
	dev = append(dev, dev...)
	f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), dev))
	f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 7)))
	f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff, 0xfe})))
	f.Add([]byte{0x0a, 0x80})
	// Five devices with invalid UTF-8 in the fourth, then also in the second: the error must
	// name the first one whichever half decodes it.
	five := make([]*pluginapi.Device, 5)
	for i := range five {
		five[i] = &pluginapi.Device{ID: fmt.Sprintf("gpu-%d", i), Health: pluginapi.Healthy}
	}
	bad := listMessage(f, five...)
	bad[bytes.Index(bad, []byte("gpu-3"))] = 0xff
	f.Add(bad)
	bad = bytes.Clone(bad)
	bad[bytes.Index(bad, []byte("gpu-1"))] = 0xff
	f.Add(bad)
	f.Fuzz(func(t *testing.T, b []byte) {
		// Decoded in two halves on two goroutines, any message of two devices or more gives
		// what one pass gives, error included.
		one, two := &pluginapi.ListAndWatchResponse{}, &pluginapi.ListAndWatchResponse{}
		oneErr, twoErr := decodeDevices(string(b), one, math.MaxInt), decodeDevices(string(b), two, 2)
		if fmt.Sprint(oneErr) != fmt.Sprint(twoErr) || oneErr == nil && !proto.Equal(one, two) {
			t.Fatalf("one pass: %v, %v; two halves: %v, %v", one, oneErr, two, twoErr)
		}

		got, gotErr := fastOrSlow(b)
		want := &pluginapi.ListAndWatchResponse{}
		wantErr := proto.Unmarshal(b, want)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("codec error %v, proto error %v", gotErr, wantErr)
		}
		if gotErr == nil && !proto.Equal(got, want) {
			t.Fatalf("codec decoded %v, proto %v", got, want)
		}
	})
}

func TestDecodeLargeList(t *testing.T) {
	devs := make([]*pluginapi.Device, 100000)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: fmt.Sprintf("dev-%06d", i), Health: pluginapi.Healthy,
			Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(i % 4)}}}}
	}
	b := listMessage(t, devs...)
	resp := &pluginapi.ListAndWatchResponse{}
	if err := decodeListAndWatch(string(b), resp); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(resp, &pluginapi.ListAndWatchResponse{Devices: devs}) {
		t.Fatalf("100,000 devices did not decode intact")
	}
}

func BenchmarkDecodeListAndWatch(b *testing.B) {
	devs := make([]*pluginapi.Device, 1000)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: fmt.Sprintf("GPU-%08d-0000-4000-8000-000000000000", i), Health: pluginapi.Healthy}
	}
	msg := listMessage(b, devs...)
	b.Run("codec/devices=1000", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			// The conversion is the codec's copy of the received buffers.
			if err := decodeListAndWatch(string(msg), &pluginapi.ListAndWatchResponse{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto/devices=1000", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := proto.Unmarshal(msg, &pluginapi.ListAndWatchResponse{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzWirePrimitives: on any input the string primitives return what protowire's return.
func FuzzWirePrimitives(f *testing.F) {
	for _, b := range [][]byte{{}, {0x08}, {0x80}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, {0x07}, {0xf8, 0xff, 0xff, 0xff, 0x0f}, {0x0a, 0x03, 'a', 'b'}} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := string(b)
		u, n := consumeVarint(s)
		if wu, wn := protowire.ConsumeVarint(b); u != wu || n != wn {
			t.Fatalf("consumeVarint(%x) = %d, %d; protowire: %d, %d", b, u, n, wu, wn)
		}
		num, typ, n := consumeTag(s)
		wnum, wtyp, wn := protowire.ConsumeTag(b)
		if num != wnum || typ != wtyp || n != wn {
			t.Fatalf("consumeTag(%x) = %d, %d, %d; protowire: %d, %d, %d", b, num, typ, n, wnum, wtyp, wn)
		}
		v, n := consumeBytes(s)
		wv, wn := protowire.ConsumeBytes(b)
		if v != string(wv) || n != wn {
			t.Fatalf("consumeBytes(%x) = %q, %d; protowire: %q, %d", b, v, n, wv, wn)
		}
	})
}

// TestCodecJoinsBuffers: a message that arrives in several buffers, split inside devices,
// decodes as proto.Unmarshal decodes it whole.
func TestCodecJoinsBuffers(t *testing.T) {
	devs := make([]*pluginapi.Device, 300)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: fmt.Sprintf("gpu-%d", i), Health: pluginapi.Healthy}
	}
	b := listMessage(t, devs...)
	var data mem.BufferSlice
	for off := 0; off < len(b); off += 7 {
		data = append(data, mem.SliceBuffer(b[off:min(off+7, len(b))]))
	}
	got := &pluginapi.ListAndWatchResponse{}
	if err := newListAndWatchCodec().Unmarshal(data, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, &pluginapi.ListAndWatchResponse{Devices: devs}) {
		t.Fatalf("a message in %d buffers did not decode intact", len(data))
	}
}

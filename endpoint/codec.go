package endpoint

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// listAndWatchCodec is the gRPC codec of the ListAndWatch stream: the standard proto codec,
// except that a ListAndWatchResponse is decoded by hand. A plugin re-sends its whole device
// list on every change; decoding it reflectively costs several allocations per device, which
// dominates the manager's cost of a health flip on a large node. The hand decoder allocates
// every Device of a message in one slab, and all their strings in one backing string.
//
// Wire compatibility is exact: the codec's name is "proto", marshalling is delegated, and any
// message the fast path does not fully understand (an unknown field, an unexpected wire type)
// is decoded by proto.Unmarshal instead, so the result is always what protobuf-go would give.
type listAndWatchCodec struct{ proto encoding.CodecV2 }

func newListAndWatchCodec() encoding.CodecV2 {
	return listAndWatchCodec{proto: encoding.GetCodecV2("proto")}
}

func (c listAndWatchCodec) Name() string { return "proto" }

func (c listAndWatchCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c listAndWatchCodec) Unmarshal(data mem.BufferSlice, v any) error {
	resp, ok := v.(*pluginapi.ListAndWatchResponse)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	err := decodeListAndWatch(copyString(data), resp)
	if errors.Is(err, errSlowPath) {
		resp.Reset()
		return c.proto.Unmarshal(data, v)
	}
	return err
}

// copyString copies the message's buffers into one string, which its devices' strings are
// cut from.
func copyString(data mem.BufferSlice) string {
	var b strings.Builder
	b.Grow(data.Len())
	for _, buf := range data {
		b.Write(buf.ReadOnlyData())
	}
	return b.String()
}

// errSlowPath asks for the standard decoder.
var errSlowPath = errors.New("message needs the standard decoder")

// decodeListAndWatch decodes b into resp (which must be empty). It returns errSlowPath for
// anything beyond the fields kdm knows, and an error for malformed input or invalid UTF-8
// (proto3 strings must be valid UTF-8, and protobuf-go rejects them too).
func decodeListAndWatch(b string, resp *pluginapi.ListAndWatchResponse) error {
	return decodeDevices(b, resp, concurrentDecodeMin)
}

// concurrentDecodeMin is the number of devices from which a message is decoded in two halves,
// on two goroutines: a million devices take about 100 ms on one.
const concurrentDecodeMin = 1 << 14

// decodeDevices is decodeListAndWatch, decoding the second half of a message of splitAt
// devices or more on a second goroutine. The result and the error are the same either way:
// the error is the first device's in the message's order.
func decodeDevices(b string, resp *pluginapi.ListAndWatchResponse, splitAt int) error {
	n, err := countDevices(b)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	d := deviceDecoder{msg: b, devs: make([]pluginapi.Device, n), ptrs: make([]*pluginapi.Device, n)}
	if n < max(splitAt, 2) {
		err = d.decode(0, len(b), 0)
	} else {
		mid := n / 2
		at := deviceOffset(b, mid)
		var second error
		done := make(chan struct{})
		go func() {
			defer close(done)
			second = d.decode(at, len(b), mid)
		}()
		err = d.decode(0, at, 0)
		<-done
		if err == nil {
			err = second
		}
	}
	if err != nil {
		return err
	}
	resp.Devices = d.ptrs
	return nil
}

// deviceDecoder decodes the devices of one message, whose layout countDevices validated,
// into one slab (devs), with every string cut from the message. Goroutines may decode
// disjoint ranges of it at once.
type deviceDecoder struct {
	msg  string
	devs []pluginapi.Device
	ptrs []*pluginapi.Device
}

// decode decodes the devices in msg[from:to], the first of which is device first.
func (d *deviceDecoder) decode(from, to, first int) error {
	i := first
	for off := from; off < to; i++ {
		_, _, tagLen := consumeTag(d.msg[off:])
		off += tagLen
		v, l := consumeBytes(d.msg[off:])
		dev := &d.devs[i]
		if err := decodeDevice(v, dev); err != nil {
			if errors.Is(err, errSlowPath) {
				return errSlowPath
			}
			return fmt.Errorf("device %d: %w", i, err)
		}
		d.ptrs[i] = dev
		off += l
	}
	return nil
}

// deviceOffset returns the offset in b of device k, in a message countDevices validated.
func deviceOffset(b string, k int) int {
	off := 0
	for range k {
		_, _, tagLen := consumeTag(b[off:])
		_, l := consumeBytes(b[off+tagLen:])
		off += tagLen + l
	}
	return off
}

// countDevices checks that every top-level field is field 1 (devices) with length-delimited
// wire type, and counts them.
func countDevices(b string) (int, error) {
	n := 0
	for len(b) > 0 {
		num, typ, tagLen := consumeTag(b)
		if tagLen < 0 {
			return 0, protowire.ParseError(tagLen)
		}
		if num != 1 || typ != protowire.BytesType {
			return 0, errSlowPath
		}
		_, l := consumeBytes(b[tagLen:])
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[tagLen+l:]
		n++
	}
	return n, nil
}

// decodeDevice decodes one Device from msg; its strings are cut from msg.
func decodeDevice(msg string, d *pluginapi.Device) error {
	for len(msg) > 0 {
		num, typ, tagLen := consumeTag(msg)
		if tagLen < 0 {
			return protowire.ParseError(tagLen)
		}
		if typ != protowire.BytesType || num < 1 || num > 3 {
			return errSlowPath
		}
		v, l := consumeBytes(msg[tagLen:])
		if l < 0 {
			return protowire.ParseError(l)
		}
		msg = msg[tagLen+l:]
		switch num {
		case 1, 2:
			if !utf8.ValidString(v) {
				return fmt.Errorf("string field %d is not valid UTF-8", num)
			}
			if num == 1 {
				d.ID = v
			} else {
				d.Health = internHealth(v)
			}
		case 3:
			if d.Topology == nil {
				d.Topology = &pluginapi.TopologyInfo{}
			}
			if err := decodeTopology(v, d.Topology); err != nil {
				return err
			}
		}
	}
	return nil
}

// decodeTopology merges a TopologyInfo into t, as proto does when the field repeats.
func decodeTopology(msg string, t *pluginapi.TopologyInfo) error {
	for len(msg) > 0 {
		num, typ, tagLen := consumeTag(msg)
		if tagLen < 0 {
			return protowire.ParseError(tagLen)
		}
		if num != 1 || typ != protowire.BytesType {
			return errSlowPath
		}
		v, l := consumeBytes(msg[tagLen:])
		if l < 0 {
			return protowire.ParseError(l)
		}
		msg = msg[tagLen+l:]
		node := &pluginapi.NUMANode{}
		for len(v) > 0 {
			fnum, ftyp, ftag := consumeTag(v)
			if ftag < 0 {
				return protowire.ParseError(ftag)
			}
			if fnum != 1 || ftyp != protowire.VarintType {
				return errSlowPath
			}
			id, fl := consumeVarint(v[ftag:])
			if fl < 0 {
				return protowire.ParseError(fl)
			}
			node.ID = int64(id)
			v = v[ftag+fl:]
		}
		t.Nodes = append(t.Nodes, node)
	}
	return nil
}

// internHealth returns the package constant for the two common values, so a message's
// health strings do not each keep the message's backing string alive.
func internHealth(s string) string {
	switch s {
	case pluginapi.Healthy:
		return pluginapi.Healthy
	case pluginapi.Unhealthy:
		return pluginapi.Unhealthy
	}
	return s
}

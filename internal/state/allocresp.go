package state

import (
	"encoding/binary"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The wire-form check below answers, without building anything, the question restoring a
// checkpoint asks of every stored plugin answer: does proto.Unmarshal accept it as a
// ContainerAllocateResponse? An entry whose answer does not decode is dropped, as the kubelet
// drops it; one that does is kept in wire form and decoded when first needed (see
// Allocation.Response). FuzzValidAllocRespMatchesUnmarshal holds the check to proto.Unmarshal.
//
// The rules are the protobuf runtime's for a proto3 message: every tag is a valid varint with
// a field number in 1..2^29-1 and is not an end-group; a known field whose wire type differs
// from its declaration counts as unknown; unknown fields (groups included) must be well
// formed; string fields (map keys and values too) must be valid UTF-8; nested messages follow
// the same rules.

// wireField is what a message declares for a field number.
type wireField uint8

const (
	unknownWireField wireField = iota
	stringWireField            // string: length-delimited, valid UTF-8
	boolWireField              // bool: varint
	messageWireField           // a nested message (a map entry too), checked with its schema
)

// wireSchema describes one message: the kind of each field number and, for nested messages,
// their schema. The messages here declare field numbers below maxSchemaField only.
type wireSchema struct {
	kinds  [maxSchemaField]wireField
	nested [maxSchemaField]*wireSchema
}

const maxSchemaField = 6

// kind is what s declares for field number num.
func (s *wireSchema) kind(num uint64) wireField {
	if num < maxSchemaField {
		return s.kinds[num]
	}
	return unknownWireField
}

// The deviceplugin v1beta1 messages a ContainerAllocateResponse is made of.
var (
	// mount: container_path, host_path, read_only.
	mountSchema = &wireSchema{kinds: [maxSchemaField]wireField{1: stringWireField, 2: stringWireField, 3: boolWireField}}
	// deviceSpec: container_path, host_path, permissions.
	deviceSpecSchema = &wireSchema{kinds: [maxSchemaField]wireField{1: stringWireField, 2: stringWireField, 3: stringWireField}}
	// stringMapEntrySchema is an entry of a map<string, string>: key 1, value 2. On the wire
	// it is a message like any other, and the runtime checks it by the same rules.
	stringMapEntrySchema = &wireSchema{kinds: [maxSchemaField]wireField{1: stringWireField, 2: stringWireField}}
	// cdiDevice: name.
	cdiDeviceSchema = &wireSchema{kinds: [maxSchemaField]wireField{1: stringWireField}}
	// allocRespSchema: envs, mounts, devices, annotations, cdi_devices.
	allocRespSchema = &wireSchema{
		kinds: [maxSchemaField]wireField{1: messageWireField, 2: messageWireField, 3: messageWireField, 4: messageWireField, 5: messageWireField},
		nested: [maxSchemaField]*wireSchema{1: stringMapEntrySchema, 2: mountSchema, 3: deviceSpecSchema,
			4: stringMapEntrySchema, 5: cdiDeviceSchema},
	}
)

// validAllocResp reports whether proto.Unmarshal accepts b as a ContainerAllocateResponse.
func validAllocResp(b []byte) bool { return validWireMessage(b, allocRespSchema) }

// validWireMessage reports whether b is a well-formed message of schema s. Tags and lengths
// below 128, which real answers are made of, are read inline.
func validWireMessage(b []byte, s *wireSchema) bool {
	for len(b) > 0 {
		tag, ok := uint64(b[0]), true
		if tag < 0x80 {
			b = b[1:]
		} else if tag, b, ok = consumeVarint(b); !ok {
			return false
		}
		num, typ := tag>>3, protowire.Type(tag&7)
		if num < uint64(protowire.MinValidNumber) || num > uint64(protowire.MaxValidNumber) || typ == protowire.EndGroupType {
			return false
		}
		switch kind := s.kind(num); {
		case kind == boolWireField && typ == protowire.VarintType:
			if _, b, ok = consumeVarint(b); !ok {
				return false
			}
			continue
		case (kind == stringWireField || kind == messageWireField) && typ == protowire.BytesType:
			var n uint64
			if n, b, ok = consumeVarint(b); !ok || n > uint64(len(b)) {
				return false
			}
			v := b[:n]
			b = b[n:]
			if kind == stringWireField && !validUTF8(v) || kind == messageWireField && !validWireMessage(v, s.nested[num]) {
				return false
			}
			continue
		}
		// A field s does not declare, or declares with another wire type: skipped if well formed.
		n := protowire.ConsumeFieldValue(protowire.Number(num), typ, b)
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// consumeVarint reads a varint from the start of b, returning it and the rest of b; ok is
// false when b does not start with a valid one.
func consumeVarint(b []byte) (v uint64, rest []byte, ok bool) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), b[1:], true
	}
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, b, false
	}
	return v, b[n:], true
}

// validUTF8 is utf8.Valid, with the ASCII strings answers are made of checked inline.
func validUTF8(v []byte) bool {
	for len(v) >= 8 {
		if binary.LittleEndian.Uint64(v)&0x8080808080808080 != 0 {
			return utf8.Valid(v) // an ASCII prefix does not change the answer
		}
		v = v[8:]
	}
	for i, c := range v {
		if c >= 0x80 {
			return utf8.Valid(v[i:])
		}
	}
	return true
}

package state

import (
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
// their schema.
type wireSchema struct {
	fields   func(protowire.Number) wireField
	messages func(protowire.Number) *wireSchema
}

// The deviceplugin v1beta1 messages a ContainerAllocateResponse is made of.
var (
	mountSchema = &wireSchema{fields: func(n protowire.Number) wireField {
		switch n {
		case 1, 2: // container_path, host_path
			return stringWireField
		case 3: // read_only
			return boolWireField
		}
		return unknownWireField
	}}
	deviceSpecSchema = &wireSchema{fields: func(n protowire.Number) wireField {
		if n >= 1 && n <= 3 { // container_path, host_path, permissions
			return stringWireField
		}
		return unknownWireField
	}}
	// stringMapEntrySchema is an entry of a map<string, string>: key 1, value 2. On the wire
	// it is a message like any other, and the runtime checks it by the same rules.
	stringMapEntrySchema = &wireSchema{fields: func(n protowire.Number) wireField {
		if n == 1 || n == 2 {
			return stringWireField
		}
		return unknownWireField
	}}
	cdiDeviceSchema = &wireSchema{fields: func(n protowire.Number) wireField {
		if n == 1 { // name
			return stringWireField
		}
		return unknownWireField
	}}
	allocRespSchema = &wireSchema{
		fields: func(n protowire.Number) wireField {
			if n >= 1 && n <= 5 { // envs, mounts, devices, annotations, cdi_devices
				return messageWireField
			}
			return unknownWireField
		},
		messages: func(n protowire.Number) *wireSchema {
			switch n {
			case 2:
				return mountSchema
			case 3:
				return deviceSpecSchema
			case 5:
				return cdiDeviceSchema
			}
			return stringMapEntrySchema
		},
	}
)

// validAllocResp reports whether proto.Unmarshal accepts b as a ContainerAllocateResponse.
func validAllocResp(b []byte) bool { return validWireMessage(b, allocRespSchema) }

// validWireMessage reports whether b is a well-formed message of schema s.
func validWireMessage(b []byte, s *wireSchema) bool {
	for len(b) > 0 {
		tag, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
		if tag>>3 < uint64(protowire.MinValidNumber) || tag>>3 > uint64(protowire.MaxValidNumber) || typ == protowire.EndGroupType {
			return false
		}
		n = consumeDeclared(b, num, typ, s)
		if n == errUnknownField {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// errUnknownField is consumeDeclared's answer for a field to be skipped as unknown.
const errUnknownField = -1 << 30

// consumeDeclared checks the value of field num (wire type typ) at the start of b against s
// and returns its length, errUnknownField when the field is unknown to s or has another wire
// type than declared, or another negative number when the value is invalid.
func consumeDeclared(b []byte, num protowire.Number, typ protowire.Type, s *wireSchema) int {
	kind := s.fields(num)
	switch {
	case kind == unknownWireField:
		return errUnknownField
	case kind == boolWireField:
		if typ != protowire.VarintType {
			return errUnknownField
		}
		_, n := protowire.ConsumeVarint(b)
		return n
	case typ != protowire.BytesType:
		return errUnknownField
	}
	v, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return n
	}
	if kind == stringWireField && !utf8.Valid(v) || kind == messageWireField && !validWireMessage(v, s.messages(num)) {
		return -1
	}
	return n
}

package grpcwire

import (
	"fmt"
	"net/http"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ratebatch/ratebatch/kserve"
)

// A ModelInferRequest is read from its wire form before it is decoded,
// for two things the gRPC door needs first: the model and version it
// names (InferTarget: a call relayed to Triton is never decoded), and
// what decoding it would cost (ScanInfer). Decoding a message costs more
// than its bytes: every tensor, parameter and BYTES element is a struct,
// a map entry or a slice of its own, and typed contents are unpacked and
// packed again, so 40,000 one-byte inputs in 0.9 MB took 24 MB. The
// door charges the cost to the memory budget, and refuses a request past
// the bounds the HTTP door keeps (kserve.MaxTensors, MaxParameters,
// MaxDims), before a byte of it is decoded.

// InferTarget reads a ModelInferRequest's model_name (field 1) and
// model_version (field 2) without decoding the rest: the last occurrence
// of each wins, as in proto3 decoding.
func InferTarget(b []byte) (model, version string, err error) {
	err = fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ == protowire.BytesType && num == 1 {
			model = string(v)
		} else if typ == protowire.BytesType && num == 2 {
			version = string(v)
		}
		return nil
	})
	return model, version, err
}

// InferCost is what decoding a ModelInferRequest would take.
type InferCost struct {
	// Inputs, Outputs and Raw count the inputs, requested outputs and
	// raw_input_contents entries.
	Inputs, Outputs, Raw int
	// Decoded bounds the bytes that decoding the message allocates
	// (proto.Unmarshal, then ToRequest), beyond the message's own bytes.
	Decoded int64
}

// What a decoded part costs at most, in bytes (TestScanInferBoundsDecoding
// holds the bound against the allocations measured): each message or map
// entry (its struct, its map slot, the kserve value made of it), each
// string or bytes field (a copy and its header), each element of typed
// contents (unpacked, then packed again: twice its size), each dimension.
const (
	requestCost = 8192
	messageCost = 320
	stringCost  = 48
	dimCost     = 16
	// bytesCost is a BYTES element's: its slice in a slice of slices,
	// grown as decoded, and its length in the packed form.
	bytesCost = 192
)

// elementCost is what one element of InferTensorContents' field num costs
// decoded: its Go value, then its packed form (a bool's slice grows as it
// is decoded).
var elementCost = [...]int64{1: 3, 2: 8, 3: 16, 4: 8, 5: 16, 6: 8, 7: 16}

// ScanInfer reads what decoding a ModelInferRequest would cost, and
// refuses one past the bounds of a request (kserve.MaxTensors,
// MaxParameters, MaxDims) with the HTTP door's 400 (INVALID_ARGUMENT). A
// message that is not well-formed is an error as proto.Unmarshal's would
// be.
func ScanInfer(b []byte) (InferCost, error) {
	c := InferCost{Decoded: requestCost}
	params := 0
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			c.unknown(v) // no scalar field here: kept as an unknown field
			return nil
		}
		switch num {
		case 4:
			params++
			return c.param(v, params)
		case 5:
			c.Inputs++
			if c.Inputs > kserve.MaxTensors {
				return tooMany(kserve.MaxTensors, "inputs")
			}
			return c.input(v)
		case 6:
			c.Outputs++
			if c.Outputs > kserve.MaxTensors {
				return tooMany(kserve.MaxTensors, "requested outputs")
			}
			return c.output(v)
		case 7:
			c.Raw++
			if c.Raw > kserve.MaxTensors {
				return tooMany(kserve.MaxTensors, "raw_input_contents")
			}
		}
		c.unknown(v) // a string, a raw input, or a field of a newer protocol: a copy
		return nil
	})
	return c, err
}

func tooMany(n int, what string) error {
	return &kserve.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("more than %d %s", n, what)}
}

// unknown costs a field decoded as a copy of its bytes: a string, a bytes
// field, or one proto keeps as unknown.
func (c *InferCost) unknown(v []byte) { c.Decoded += stringCost + int64(len(v)) }

// param costs one parameters map entry, the n-th of its map: the entry,
// its InferParameter and the kserve value made of it, their strings.
func (c *InferCost) param(b []byte, n int) error {
	if n > kserve.MaxParameters {
		return tooMany(kserve.MaxParameters, "parameters")
	}
	c.Decoded += 2*messageCost + 2*int64(len(b))
	return nil
}

// input costs an InferInputTensor.
func (c *InferCost) input(b []byte) error {
	c.Decoded += messageCost
	dims, params := 0, 0
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 3: // shape: packed, or one varint per dimension
			n := 1
			if typ == protowire.BytesType {
				n = varints(v)
			}
			if dims += n; dims > kserve.MaxDims {
				return &kserve.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("more than %d dimensions", kserve.MaxDims)}
			}
			c.Decoded += dimCost * int64(n)
		case num == 4 && typ == protowire.BytesType:
			params++
			return c.param(v, params)
		case num == 5 && typ == protowire.BytesType:
			return c.contents(v)
		default:
			c.unknown(v)
		}
		return nil
	})
}

// output costs an InferRequestedOutputTensor.
func (c *InferCost) output(b []byte) error {
	c.Decoded += messageCost
	params := 0
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num == 2 && typ == protowire.BytesType {
			params++
			return c.param(v, params)
		}
		c.unknown(v)
		return nil
	})
}

// contents costs an InferTensorContents: its elements, unpacked and
// packed again.
func (c *InferCost) contents(b []byte) error {
	c.Decoded += messageCost
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 8 && typ == protowire.BytesType: // one BYTES element
			c.Decoded += bytesCost + 2*int64(len(v))
		case num < 1 || int(num) >= len(elementCost):
			c.unknown(v)
		case typ != protowire.BytesType: // one element
			c.Decoded += elementCost[num]
		case num == 6: // packed fixed32
			c.Decoded += elementCost[num] * int64(len(v)/4)
		case num == 7: // packed fixed64
			c.Decoded += elementCost[num] * int64(len(v)/8)
		default: // packed varints
			c.Decoded += elementCost[num] * int64(varints(v))
		}
		return nil
	})
}

// varints counts the varints of a packed field: the bytes that end one.
func varints(b []byte) int {
	n := 0
	for _, x := range b {
		if x < 0x80 {
			n++
		}
	}
	return n
}

// fields calls f with each field of the message b: its number, its wire
// type and its bytes (a length-delimited field's contents, a scalar's
// encoding). A malformed message is an error.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n >= 0 {
				v = b[:n]
			}
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

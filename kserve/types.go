// Package kserve owns the KServe v2 inference protocol as Triton speaks it
// over HTTP: the request and response types, the JSON and binary-tensor wire
// forms, merging N single requests into one batched request and splitting the
// batched response back into N responses.
//
// All tensor data, whatever its wire form, lives in one representation:
// Tensor.Data holds row-major little-endian raw bytes, and BYTES tensors use
// Triton's binary layout (a 4-byte little-endian length before each element).
// Decoding the binary form slices Data out of the body without copying, and
// JSON data is scanned once straight into such a buffer, so merging costs one
// copy and splitting binary outputs costs none.
package kserve

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// HeaderContentLength is the HTTP header of Triton's binary tensor extension:
// the length of the JSON header at the start of the body; the rest of the
// body holds the binary tensor data.
const HeaderContentLength = "Inference-Header-Content-Length"

// Parameter names with a meaning to the codec or to batching.
const (
	ParamBinaryDataSize   = "binary_data_size"   // tensor: bytes of its data in the binary section
	ParamBinaryData       = "binary_data"        // requested output: return it in binary form
	ParamBinaryDataOutput = "binary_data_output" // request: default for binary_data of every output
	ParamClassification   = "classification"     // requested output: top-k classes instead of the tensor
	ParamSharedMemRegion  = "shared_memory_region"
	ParamSharedMemSize    = "shared_memory_byte_size"
	ParamSharedMemOffset  = "shared_memory_offset"
	ParamSequenceID       = "sequence_id"
	ParamSequenceStart    = "sequence_start"
	ParamSequenceEnd      = "sequence_end"
	ParamTimeout          = "timeout"
	ParamPriority         = "priority"
)

// Datatype is a KServe v2 tensor datatype name, e.g. "FP32".
type Datatype string

// The datatypes of the KServe v2 protocol plus Triton's BF16.
const (
	Bool   Datatype = "BOOL"
	Uint8  Datatype = "UINT8"
	Uint16 Datatype = "UINT16"
	Uint32 Datatype = "UINT32"
	Uint64 Datatype = "UINT64"
	Int8   Datatype = "INT8"
	Int16  Datatype = "INT16"
	Int32  Datatype = "INT32"
	Int64  Datatype = "INT64"
	FP16   Datatype = "FP16"
	BF16   Datatype = "BF16"
	FP32   Datatype = "FP32"
	FP64   Datatype = "FP64"
	Bytes  Datatype = "BYTES"
)

// Datatypes lists every supported datatype.
var Datatypes = []Datatype{Bool, Uint8, Uint16, Uint32, Uint64, Int8, Int16, Int32, Int64, FP16, BF16, FP32, FP64, Bytes}

// ParseDatatype returns the datatype named s (case-sensitive, as on the wire).
func ParseDatatype(s string) (Datatype, error) {
	d := Datatype(s)
	if d.Size() == 0 && d != Bytes {
		return "", fmt.Errorf("unknown datatype %q (want one of BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32, FP64, BYTES)", s)
	}
	return d, nil
}

// Half reports whether d is FP16 or BF16, the 16-bit floats that Triton
// takes and gives only in binary form, never as JSON numbers.
func (d Datatype) Half() bool { return d == FP16 || d == BF16 }

// Size is the byte size of one element: 0 for BYTES, whose elements vary in
// length, and for unknown datatypes.
func (d Datatype) Size() int {
	switch d {
	case Bool, Uint8, Int8:
		return 1
	case Uint16, Int16, FP16, BF16:
		return 2
	case Uint32, Int32, FP32:
		return 4
	case Uint64, Int64, FP64:
		return 8
	}
	return 0
}

// Valid reports whether d is a supported datatype.
func (d Datatype) Valid() bool { return d == Bytes || d.Size() > 0 }

// Parameters is a KServe v2 "parameters" object. Values are bool, string,
// int64, uint64 (integers above MaxInt64), float64 or RawJSON (objects,
// arrays, null: kept verbatim). Unknown parameters pass through to the
// upstream unchanged. Encoding also accepts Go int, int32, uint32 and float32.
// Decoded Parameters may be shared between requests (see flagParameters):
// Clone them before changing them.
type Parameters map[string]any

// RawJSON is a parameter value kept as its JSON text.
type RawJSON []byte

// Bool returns the boolean parameter key; ok is false when absent or not a bool.
func (p Parameters) Bool(key string) (v, ok bool) {
	v, ok = p[key].(bool)
	return v, ok
}

// Int returns the integer parameter key; ok is false when absent, not an
// integer, or out of int64 range.
func (p Parameters) Int(key string) (int64, bool) {
	switch v := p[key].(type) {
	case int64:
		return v, true
	case int:
		return int64(v), true
	case int32:
		return int64(v), true
	case uint32:
		return int64(v), true
	}
	return 0, false
}

// Uint returns the non-negative integer parameter key, the whole range of
// Triton's uint64 parameters (priority, timeout); ok is false when absent,
// not an integer, or negative.
func (p Parameters) Uint(key string) (uint64, bool) {
	if v, ok := p[key].(uint64); ok {
		return v, true
	}
	if v, ok := p.Int(key); ok && v >= 0 {
		return uint64(v), true
	}
	return 0, false
}

// String returns the string parameter key; ok is false when absent or not a string.
func (p Parameters) String(key string) (string, bool) {
	v, ok := p[key].(string)
	return v, ok
}

// Clone returns a shallow copy (nil stays nil); values are immutable in use.
func (p Parameters) Clone() Parameters {
	if p == nil {
		return nil
	}
	q := make(Parameters, len(p))
	for k, v := range p {
		q[k] = v
	}
	return q
}

// Tensor is an input of a request or an output of a response.
type Tensor struct {
	Name       string
	Datatype   Datatype
	Shape      []int64
	Parameters Parameters // without binary_data_size: the codec derives it from Data
	// Data is row-major little-endian raw bytes; BYTES elements are each a
	// 4-byte little-endian length followed by the bytes. After decoding the
	// binary form it aliases the body. Nil for shared-memory tensors.
	Data []byte
	// Binary says the data arrived, or is to be sent, in the binary section
	// rather than as a JSON "data" array.
	Binary bool
	// deferred is JSON "data" that DecodeRequestDeferred left undecoded:
	// Data is nil until Request.DecodeData.
	deferred jsonText
}

// Deferred reports whether t's JSON data awaits Request.DecodeData.
func (t *Tensor) Deferred() bool { return t.deferred.buf != nil }

// errDeferred refuses to encode or merge data not decoded yet.
var errDeferred = errors.New("data not decoded yet (Request.DecodeData)")

// SharedMemory reports whether the tensor's data lives in a shared-memory
// region named by its parameters rather than in the body.
func (t *Tensor) SharedMemory() bool {
	_, ok := t.Parameters[ParamSharedMemRegion]
	return ok
}

// Elements is the number of elements the shape declares (see ElementCount).
func (t *Tensor) Elements() (int64, error) { return ElementCount(t.Shape) }

// maxElements bounds element counts so that count*8 and sums of such never
// overflow an int64; no real body comes near it.
const maxElements = 1 << 56

// ElementCount is the product of the dimensions; it fails on negative
// dimensions and on products too large to be real (overflow included).
func ElementCount(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %s has a negative dimension", FormatShape(shape))
		}
		if d != 0 && n > maxElements/d {
			return 0, fmt.Errorf("shape %s has too many elements", FormatShape(shape))
		}
		n *= d
	}
	return n, nil
}

// FormatShape renders a shape as in error messages: [2,16].
func FormatShape(shape []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range shape {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// RequestedOutput names an output the caller wants, with its options.
type RequestedOutput struct {
	Name       string
	Parameters Parameters
}

// Binary reports whether the output was requested with binary_data: true.
// Use (*Request).OutputBinary for the effective choice, which also honours
// the request-level binary_data_output.
func (o *RequestedOutput) Binary() bool {
	v, _ := o.Parameters.Bool(ParamBinaryData)
	return v
}

// Classification is the requested top-k classification count, 0 for none.
func (o *RequestedOutput) Classification() int {
	v, ok := o.Parameters.Int(ParamClassification)
	if !ok || v < 0 || v > 1<<31 {
		return 0
	}
	return int(v)
}

// Request is a KServe v2 inference request. The model name and version come
// from the URL path and are not part of the body.
type Request struct {
	ID         string
	Parameters Parameters
	Inputs     []Tensor
	Outputs    []RequestedOutput // empty: all outputs
}

// Response is a KServe v2 inference response.
type Response struct {
	ModelName    string
	ModelVersion string
	ID           string
	Parameters   Parameters
	Outputs      []Tensor
}

// Error is a KServe v2 error: an HTTP status and the message that goes in
// the body {"error": "..."}. Every decoding error is an *Error with status
// 400 (BadRequest).
type Error struct {
	Status int
	Msg    string
	// ContentType is the Content-Type of the HTTP answer that carries the
	// error (ErrorContentType): Triton's own when the error is Triton's
	// answer passed back; else the one Triton gives an error of its kind.
	// "": ContentTypeText.
	ContentType string
}

func (e *Error) Error() string { return e.Msg }

// The Content-Types of Triton's HTTP error answers (tritonserver 2.51): a
// request its front end could not take as it is (its JSON, parameters or
// tensors; a batch larger than the model's) is answered application/json,
// every other error text/plain: an inference's (a backend's error, a queue
// timeout, an unknown model), a refusal (a restricted API), a malformed
// header. The body is a KServe v2 error either way; a client that reads
// the type reads Triton's.
const (
	ContentTypeJSON = "application/json"
	ContentTypeText = "text/plain"
)

// BadRequest builds the 400 *Error of a request that cannot be taken as
// it is: every decoding and validation failure of its JSON, parameters
// and tensors, answered application/json as Triton's front end answers it.
func BadRequest(format string, args ...any) *Error {
	return &Error{Status: 400, Msg: fmt.Sprintf(format, args...), ContentType: ContentTypeJSON}
}

package kserve

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseHeaderLength interprets the Inference-Header-Content-Length header
// value: -1 when absent (the whole body is JSON), else the JSON header's
// length, which must lie within a body of bodyLen bytes.
func ParseHeaderLength(v string, bodyLen int) (int, error) {
	if v == "" {
		return -1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		// A copy in the message keeps v from escaping: callers pass a
		// header's bytes converted in place, not a string on the heap.
		return 0, badHeader("%s %q is not a non-negative integer", HeaderContentLength, strings.Clone(v))
	}
	if n > int64(bodyLen) {
		return 0, badHeader("%s %d exceeds the body length %d", HeaderContentLength, n, bodyLen)
	}
	return int(n), nil
}

// badHeader is the 400 of a malformed header: text/plain, as Triton
// answers a bad Inference-Header-Content-Length.
func badHeader(format string, args ...any) *Error {
	return &Error{Status: 400, Msg: fmt.Sprintf(format, args...)}
}

// splitBody separates the JSON header from the binary section.
func splitBody(body []byte, headerLen int) (header, bin []byte, err error) {
	switch {
	case headerLen < 0:
		return body, nil, nil
	case headerLen > len(body):
		return nil, nil, BadRequest("%s %d exceeds the body length %d", HeaderContentLength, headerLen, len(body))
	}
	return body[:headerLen], body[headerLen:], nil
}

// DecodeRequest parses an inference request body. headerLen is the value of
// the Inference-Header-Content-Length header, or -1 when it is absent. The
// returned request aliases body: binary tensor data is sliced, not copied,
// so body must stay untouched while the request is in use. Errors are
// *Error with status 400 and name the offending tensor.
func DecodeRequest(body []byte, headerLen int) (*Request, error) {
	return decodeRequest(body, headerLen, false)
}

// DecodeRequestDeferred is DecodeRequest leaving the JSON "data" of inputs
// whose values Triton reads from JSON (numbers other than FP16 and BF16,
// and booleans) undecoded: it finds where each array ends by its brackets
// alone, with vectorised searches, and Request.DecodeData decodes and
// checks the values when they are needed. A request that goes to Triton as
// it came never needs them, and parsing every number of a large JSON
// tensor costs many times what the rest of the request does.
func DecodeRequestDeferred(body []byte, headerLen int) (*Request, error) {
	return decodeRequest(body, headerLen, true)
}

// DecodeData decodes the input data DecodeRequestDeferred left as JSON,
// with DecodeRequest's checks and errors (*Error, 400, naming the input).
// A request with none left is unchanged.
func (r *Request) DecodeData() error {
	for i := range r.Inputs {
		t := &r.Inputs[i]
		if !t.Deferred() {
			continue
		}
		n, err := ElementCount(t.Shape) // checked when decoded: no error
		if err != nil {
			return BadRequest("input %q: %v", t.Name, err)
		}
		data, err := t.deferred.decode(t.Datatype, t.Shape, n, func() string { return fmt.Sprintf("input %q", t.Name) })
		if err != nil {
			return err
		}
		t.Data, t.deferred = data, jsonText{}
	}
	return nil
}

// decodeRequest decodes a request's JSON header and binary tail into one
// allocation (requestAlloc). It stays one function: one pass over the
// header's keys, as they come.
func decodeRequest(body []byte, headerLen int, deferData bool) (*Request, error) {
	header, bin, err := splitBody(body, headerLen)
	if err != nil {
		return nil, err
	}
	a := &requestAlloc{}
	d := decoder{s: scanner{buf: header, dims: a.dims[:0]}, bin: bin, deferData: deferData}
	r := &a.r
	if err := d.s.openObject(); err != nil {
		return nil, d.wrap("request", err)
	}
	first := true
	for {
		key, ok, err := d.s.nextMember(&first)
		if err != nil {
			return nil, d.wrap("request", err)
		}
		if !ok {
			break
		}
		switch string(key) {
		case "id":
			id, err := d.s.str()
			if err != nil {
				return nil, d.wrap(`request "id"`, err)
			}
			r.ID = string(id)
		case "parameters":
			if r.Parameters, err = d.s.parameters(nil); err != nil {
				return nil, d.wrap(`request "parameters"`, err)
			}
		case "inputs":
			if r.Inputs, err = d.tensors("input", a.inputs[:0]); err != nil {
				return nil, err
			}
		case "outputs":
			if r.Outputs, err = d.requestedOutputs(); err != nil {
				return nil, err
			}
		default: // model_name, model_version and extensions: not ours to judge
			if _, err := d.s.skip(); err != nil {
				return nil, d.wrap("request", err)
			}
		}
	}
	if err := d.s.end(); err != nil {
		return nil, d.wrap("request", err)
	}
	if v, ok := r.Parameters[ParamBinaryDataOutput]; ok {
		if _, isBool := v.(bool); !isBool {
			return nil, BadRequest("request parameter %q must be true or false", ParamBinaryDataOutput)
		}
	}
	if len(r.Inputs) == 0 {
		return nil, BadRequest(`request has no "inputs"`)
	}
	if err := d.finishBinary("inputs"); err != nil {
		return nil, err
	}
	return r, nil
}

// requestAlloc is a decoded request with room for the inputs and shapes of
// most requests: one allocation instead of three. (A request with more
// inputs or dimensions grows out of it as usual.)
type requestAlloc struct {
	r      Request
	inputs [2]Tensor
	dims   [8]int64
}

// DecodeResponse parses an inference response body; headerLen as for
// DecodeRequest. Binary outputs alias body.
func DecodeResponse(body []byte, headerLen int) (*Response, error) {
	header, bin, err := splitBody(body, headerLen)
	if err != nil {
		return nil, err
	}
	d := decoder{s: scanner{buf: header}, bin: bin}
	r := &Response{}
	if err := d.s.openObject(); err != nil {
		return nil, d.wrap("response", err)
	}
	first := true
	for {
		key, ok, err := d.s.nextMember(&first)
		if err != nil {
			return nil, d.wrap("response", err)
		}
		if !ok {
			break
		}
		var str *string
		switch string(key) {
		case "model_name":
			str = &r.ModelName
		case "model_version":
			str = &r.ModelVersion
		case "id":
			str = &r.ID
		case "parameters":
			if r.Parameters, err = d.s.parameters(nil); err != nil {
				return nil, d.wrap(`response "parameters"`, err)
			}
		case "outputs":
			if r.Outputs, err = d.tensors("output", r.Outputs[:0]); err != nil {
				return nil, err
			}
		default:
			if _, err := d.s.skip(); err != nil {
				return nil, d.wrap("response", err)
			}
		}
		if str != nil {
			v, err := d.s.str()
			if err != nil {
				return nil, d.wrap(fmt.Sprintf("response %q", key), err)
			}
			*str = string(v)
		}
	}
	if err := d.s.end(); err != nil {
		return nil, d.wrap("response", err)
	}
	if err := d.finishBinary("outputs"); err != nil {
		return nil, err
	}
	return r, nil
}

// decoder carries the JSON scanner and the cursor into the binary section,
// which tensors with binary_data_size consume in order.
type decoder struct {
	s   scanner
	bin []byte
	off int
	// deferData leaves JSON data Triton reads as it is undecoded (see
	// DecodeRequestDeferred).
	deferData bool
}

// jsonText is a tensor's JSON "data" value inside its message's JSON: buf
// ends with it, it starts at pos, nested depth levels deep. Decoding it
// there reports what decoding it in place would have, offsets included.
type jsonText struct {
	buf        []byte
	pos, depth int32 // int32 keeps Tensor small; longer headers are not deferred
}

// decode decodes the value into raw data of n elements of dt; what names
// the tensor in errors.
func (j jsonText) decode(dt Datatype, shape []int64, n int64, what func() string) ([]byte, error) {
	s := scanner{buf: j.buf, pos: int(j.pos), depth: int(j.depth)}
	data, got, err := s.tensorData(dt, n)
	if err != nil {
		return nil, BadRequest("%s: %v", what(), err)
	}
	if err := checkJSONCount(what, shape, n, got); err != nil {
		return nil, err
	}
	return data, nil
}

// readsAsJSON reports whether Triton reads dt's values from JSON numbers or
// booleans: every fixed-size type but FP16 and BF16, which it refuses.
func readsAsJSON(dt Datatype) bool { return dt.Size() > 0 && !dt.Half() }

// checkJSONCount refuses JSON data of got elements for a shape of n.
func checkJSONCount(what func() string, shape []int64, n, got int64) error {
	if got != n {
		return BadRequest("%s: shape %s needs %d elements, data has %d", what(), FormatShape(shape), n, got)
	}
	return nil
}

func (d *decoder) wrap(what string, err error) error {
	if e, ok := err.(*Error); ok {
		return e
	}
	return BadRequest("%s: %v", what, err)
}

func (d *decoder) finishBinary(what string) error {
	if d.off != len(d.bin) {
		return BadRequest("body has %d bytes of binary data beyond the binary_data_size of its %s (%d bytes declared)", len(d.bin)-d.off, what, d.off)
	}
	return nil
}

// tensorFields collects one tensor object's members, in whatever order
// they come, until the object is complete.
type tensorFields struct {
	name, dtype        []byte
	hasName, hasDtype  bool
	shape              []int64
	hasShape           bool
	params             Parameters
	hasParams          bool
	binSize            int64
	hasBinSize         bool
	hasData            bool
	dataPos, dataDepth int // where "data" starts, when parsed after the object
	dataEnd            int
	parsed             bool // data already decoded into data and got
	deferred           bool // data's extent found by its brackets (decoder.deferData)
	data               []byte
	got                int64
}

// tensors parses an array of tensor objects ("inputs" of a request or
// "outputs" of a response).
func (d *decoder) tensors(kind string, dst []Tensor) ([]Tensor, error) {
	if err := d.s.openArray(); err != nil {
		return nil, d.wrap(fmt.Sprintf(`"%ss"`, kind), err)
	}
	if dst == nil {
		dst = make([]Tensor, 0, 2) // most models take one or two
	}
	first := true
	for i := 0; ; i++ {
		ok, err := d.s.nextElement(&first)
		if err != nil {
			return nil, d.wrap(fmt.Sprintf(`"%ss"`, kind), err)
		}
		if !ok {
			return dst, nil
		}
		if i == MaxTensors {
			return nil, BadRequest("more than %d %ss", MaxTensors, kind)
		}
		t, err := d.tensor(kind, i)
		if err != nil {
			return nil, err
		}
		dst = append(dst, t)
	}
}

func (d *decoder) tensor(kind string, idx int) (Tensor, error) {
	var f tensorFields
	s := &d.s
	what := func() string {
		if f.hasName {
			return fmt.Sprintf("%s %q", kind, f.name)
		}
		return fmt.Sprintf("%s %d", kind, idx)
	}
	if err := s.openObject(); err != nil {
		return Tensor{}, d.wrap(what(), err)
	}
	first := true
	for {
		key, ok, err := s.nextMember(&first)
		if err != nil {
			return Tensor{}, d.wrap(what(), err)
		}
		if !ok {
			break
		}
		var dup bool
		switch string(key) {
		case "name":
			dup = f.hasName
			f.name, err = s.str()
			f.hasName = true
		case "datatype":
			dup = f.hasDtype
			f.dtype, err = s.str()
			f.hasDtype = true
		case "shape":
			dup = f.hasShape
			f.shape, err = s.shape()
			f.hasShape = true
		case "parameters":
			dup = f.hasParams
			f.params, err = s.parameters(&f)
			f.hasParams = true
		case "data":
			dup = f.hasData
			f.hasData = true
			err = d.data(&f, what)
		default:
			_, err = s.skip()
		}
		if err != nil {
			return Tensor{}, d.wrap(fmt.Sprintf("%s %q", what(), key), err)
		}
		if dup {
			return Tensor{}, BadRequest("%s: duplicate %q", what(), key)
		}
	}
	return d.finish(&f, kind, what)
}

// data handles a tensor's "data" member. When the datatype and shape came
// first, as clients write them, fixed-size data is decoded in the same pass;
// otherwise its extent is noted and it is decoded once the object is
// complete.
func (d *decoder) data(f *tensorFields, what func() string) error {
	s := &d.s
	dt := datatypeOf(f.dtype)
	if d.deferData && (!f.hasDtype || readsAsJSON(dt)) && s.peek() == '[' && len(s.buf) <= math.MaxInt32 {
		f.dataDepth, f.dataPos = s.depth, s.pos
		if s.skipBrackets() {
			f.dataEnd, f.deferred = s.pos, true
			return nil
		}
	}
	if f.hasDtype && f.hasShape && dt.Size() > 0 {
		if n, err := ElementCount(f.shape); err == nil {
			f.data, f.got, err = s.tensorData(dt, n)
			if err != nil {
				return BadRequest("%s: %v", what(), err)
			}
			f.parsed = true
			return nil
		}
	}
	f.dataDepth = s.depth
	s.ws()
	f.dataPos = s.pos
	_, err := s.skip()
	f.dataEnd = s.pos
	return err
}

// finish validates a complete tensor object and fills its data from JSON or
// from the binary section.
func (d *decoder) finish(f *tensorFields, kind string, what func() string) (Tensor, error) {
	if !f.hasName || len(f.name) == 0 {
		return Tensor{}, BadRequest(`%s: missing "name"`, what())
	}
	if !f.hasDtype {
		return Tensor{}, BadRequest(`%s: missing "datatype"`, what())
	}
	dt := datatypeOf(f.dtype)
	if dt == "" {
		return Tensor{}, BadRequest(`%s: unknown datatype %q (want one of BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32, FP64, BYTES)`, what(), f.dtype)
	}
	if !f.hasShape {
		return Tensor{}, BadRequest(`%s: missing "shape"`, what())
	}
	n, err := ElementCount(f.shape)
	if err != nil {
		return Tensor{}, BadRequest("%s: %v", what(), err)
	}
	_, shm := f.params[ParamSharedMemRegion]
	sources := btoi(f.hasData) + btoi(f.hasBinSize) + btoi(shm)
	if sources != 1 {
		return Tensor{}, BadRequest(`%s: needs exactly one of "data", parameters.binary_data_size or parameters.shared_memory_region, has %d`, what(), sources)
	}
	t := Tensor{Name: intern(f.name), Datatype: dt, Shape: f.shape, Parameters: f.params}
	switch {
	case f.hasBinSize:
		t.Binary = true
		if f.binSize > int64(len(d.bin)-d.off) {
			return Tensor{}, BadRequest("%s: binary_data_size %d runs past the end of the body (%d bytes of binary data left)", what(), f.binSize, len(d.bin)-d.off)
		}
		t.Data = d.bin[d.off : d.off+int(f.binSize) : d.off+int(f.binSize)]
		d.off += int(f.binSize)
		if err := checkData(dt, f.shape, n, t.Data); err != nil {
			return Tensor{}, BadRequest("%s: binary_data_size %d: %v", what(), f.binSize, err)
		}
	case f.parsed:
		if err := checkJSONCount(what, f.shape, n, f.got); err != nil {
			return Tensor{}, err
		}
		t.Data = f.data
	case f.hasData:
		text := jsonText{buf: d.s.buf[:f.dataEnd], pos: int32(f.dataPos), depth: int32(f.dataDepth)}
		if f.deferred && readsAsJSON(dt) {
			t.deferred = text
			break
		}
		if t.Data, err = text.decode(dt, f.shape, n, what); err != nil {
			return Tensor{}, err
		}
	}
	return t, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// datatypeOf maps wire text to a Datatype constant without allocating; ""
// when unknown.
func datatypeOf(b []byte) Datatype {
	switch string(b) {
	case "BOOL":
		return Bool
	case "UINT8":
		return Uint8
	case "UINT16":
		return Uint16
	case "UINT32":
		return Uint32
	case "UINT64":
		return Uint64
	case "INT8":
		return Int8
	case "INT16":
		return Int16
	case "INT32":
		return Int32
	case "INT64":
		return Int64
	case "FP16":
		return FP16
	case "BF16":
		return BF16
	case "FP32":
		return FP32
	case "FP64":
		return FP64
	case "BYTES":
		return Bytes
	}
	return ""
}

// checkData verifies that raw data holds exactly n elements of dt.
func checkData(dt Datatype, shape []int64, n int64, data []byte) error {
	if size := dt.Size(); size > 0 {
		if need := n * int64(size); int64(len(data)) != need {
			return fmt.Errorf("shape %s of %s needs %d bytes, data has %d", FormatShape(shape), dt, need, len(data))
		}
		return nil
	}
	var count int64
	for off := 0; off < len(data); count++ {
		if len(data)-off < 4 {
			return fmt.Errorf("BYTES element %d: %d bytes left, too few for its 4-byte length", count, len(data)-off)
		}
		l := binary.LittleEndian.Uint32(data[off:])
		off += 4
		if uint64(l) > uint64(len(data)-off) {
			return fmt.Errorf("BYTES element %d: length %d runs past the end of the data (%d bytes left)", count, l, len(data)-off)
		}
		off += int(l)
	}
	if count != n {
		return fmt.Errorf("shape %s needs %d elements, data has %d", FormatShape(shape), n, count)
	}
	return nil
}

// shape reads an array of non-negative int64 dimensions.
func (s *scanner) shape() ([]int64, error) {
	if err := s.openArray(); err != nil {
		return nil, err
	}
	if len(s.dims) == cap(s.dims) {
		s.dims = make([]int64, 0, 4) // grown by append for more dimensions
	}
	start := len(s.dims)
	first := true
	for {
		ok, err := s.nextElement(&first)
		if err != nil {
			return nil, err
		}
		if !ok {
			return s.dims[start:len(s.dims):len(s.dims)], nil
		}
		if len(s.dims)-start == MaxDims {
			return nil, fmt.Errorf("more than %d dimensions", MaxDims)
		}
		text, isInt, err := s.number()
		if err != nil {
			return nil, err
		}
		v, ok := parseInt64(text, isInt)
		if !ok || v < 0 {
			return nil, fmt.Errorf("dimension %s is not a non-negative integer", text)
		}
		s.dims = append(s.dims, v)
	}
}

// parseInt64 converts the text of a JSON integer.
func parseInt64(text []byte, isInt bool) (int64, bool) {
	if !isInt {
		return 0, false
	}
	neg := text[0] == '-'
	if neg {
		text = text[1:]
	}
	u, ok := parseUint(text)
	switch {
	case !ok:
		return 0, false
	case neg && u <= 1<<63:
		return -int64(u), true
	case !neg && u <= math.MaxInt64:
		return int64(u), true
	}
	return 0, false
}

// requestedOutputs reads the "outputs" array of a request.
//
// It stays one function: one pass over the array, its keys read as they
// come.
func (d *decoder) requestedOutputs() ([]RequestedOutput, error) {
	s := &d.s
	if err := s.openArray(); err != nil {
		return nil, d.wrap(`"outputs"`, err)
	}
	var outs []RequestedOutput
	first := true
	for i := 0; ; i++ {
		ok, err := s.nextElement(&first)
		if err != nil {
			return nil, d.wrap(`"outputs"`, err)
		}
		if !ok {
			return outs, nil
		}
		if i == MaxTensors {
			return nil, BadRequest("more than %d requested outputs", MaxTensors)
		}
		var o RequestedOutput
		what := func() string {
			if o.Name != "" {
				return fmt.Sprintf("requested output %q", o.Name)
			}
			return fmt.Sprintf("requested output %d", i)
		}
		if err := s.openObject(); err != nil {
			return nil, d.wrap(what(), err)
		}
		firstMember := true
		for {
			key, ok, err := s.nextMember(&firstMember)
			if err != nil {
				return nil, d.wrap(what(), err)
			}
			if !ok {
				break
			}
			switch string(key) {
			case "name":
				var b []byte
				if b, err = s.str(); err == nil {
					o.Name = intern(b)
				}
			case "parameters":
				o.Parameters, err = s.parameters(nil)
			default:
				_, err = s.skip()
			}
			if err != nil {
				return nil, d.wrap(fmt.Sprintf("%s %q", what(), key), err)
			}
		}
		if o.Name == "" {
			return nil, BadRequest(`%s: missing "name"`, what())
		}
		if v, ok := o.Parameters[ParamBinaryData]; ok {
			if _, isBool := v.(bool); !isBool {
				return nil, BadRequest("%s: parameter %q must be true or false", what(), ParamBinaryData)
			}
		}
		if v, ok := o.Parameters[ParamClassification]; ok {
			if n, isInt := v.(int64); !isInt || n < 0 {
				return nil, BadRequest("%s: parameter %q must be a non-negative integer", what(), ParamClassification)
			}
		}
		outs = append(outs, o)
	}
}

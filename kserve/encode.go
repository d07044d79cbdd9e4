package kserve

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
)

// AppendRequest appends the wire form of r to dst. Inputs go in binary form
// when allBinary is set or their Binary flag is; otherwise as JSON "data".
// headerLen is the value for Inference-Header-Content-Length, or -1 when the
// body is plain JSON and the header must be omitted.
//
// AppendRequest stays one function: one pass writing the wire form in order,
// the header and the binary tail together.
func AppendRequest(dst []byte, r *Request, allBinary bool) (body []byte, headerLen int, err error) {
	start := len(dst)
	dst = append(dst, '{')
	sep := false
	if r.ID != "" {
		dst = append(dst, `"id":`...)
		dst = appendJSONString(dst, []byte(r.ID))
		sep = true
	}
	if len(r.Parameters) > 0 {
		if sep {
			dst = append(dst, ',')
		}
		dst = append(dst, `"parameters":`...)
		if dst, err = appendParameters(dst, r.Parameters, -1); err != nil {
			return dst, 0, fmt.Errorf("request parameters: %w", err)
		}
		sep = true
	}
	if sep {
		dst = append(dst, ',')
	}
	dst = append(dst, `"inputs":[`...)
	binLen := 0
	for i := range r.Inputs {
		t := &r.Inputs[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		bin := (allBinary || t.Binary) && !t.SharedMemory()
		if dst, err = appendTensor(dst, t, bin, true); err != nil {
			return dst, 0, fmt.Errorf("input %q: %w", t.Name, err)
		}
		if bin {
			binLen += len(t.Data)
		}
	}
	dst = append(dst, ']')
	if len(r.Outputs) > 0 {
		dst = append(dst, `,"outputs":[`...)
		for i := range r.Outputs {
			o := &r.Outputs[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"name":`...)
			dst = appendJSONString(dst, []byte(o.Name))
			if len(o.Parameters) > 0 {
				dst = append(dst, `,"parameters":`...)
				if dst, err = appendParameters(dst, o.Parameters, -1); err != nil {
					return dst, 0, fmt.Errorf("requested output %q: %w", o.Name, err)
				}
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	dst = append(dst, '}')
	if binLen == 0 && !anyBinary(r.Inputs, allBinary) {
		return dst, -1, nil
	}
	headerLen = len(dst) - start
	dst = slices.Grow(dst, binLen)
	for i := range r.Inputs {
		t := &r.Inputs[i]
		if (allBinary || t.Binary) && !t.SharedMemory() {
			dst = append(dst, t.Data...)
		}
	}
	return dst, headerLen, nil
}

func anyBinary(ts []Tensor, all bool) bool {
	for i := range ts {
		if (all || ts[i].Binary) && !ts[i].SharedMemory() {
			return true
		}
	}
	return false
}

// AppendResponse appends the wire form of r to dst: outputs with Binary set
// go in the binary section, the others as JSON "data". headerLen is -1 when
// no output is binary (plain JSON body, no Inference-Header-Content-Length).
func AppendResponse(dst []byte, r *Response) (body []byte, headerLen int, err error) {
	start := len(dst)
	dst, binLen, err := AppendResponseHeader(dst, r)
	if err != nil || !hasBinaryOutput(r) {
		return dst, -1, err
	}
	headerLen = len(dst) - start
	dst = slices.Grow(dst, binLen)
	for i := range r.Outputs {
		if t := &r.Outputs[i]; t.Binary && !t.SharedMemory() {
			dst = append(dst, t.Data...)
		}
	}
	return dst, headerLen, nil
}

func hasBinaryOutput(r *Response) bool {
	for i := range r.Outputs {
		if r.Outputs[i].Binary && !r.Outputs[i].SharedMemory() {
			return true
		}
	}
	return false
}

// AppendResponseHeader appends only the JSON part of r's wire form (JSON
// outputs inline) and returns the number of binary bytes that must follow
// it: the Data of each Binary output, in order. It lets a writer send
// binary outputs straight from their buffers, without copying them.
func AppendResponseHeader(dst []byte, r *Response) (header []byte, binaryLen int, err error) {
	dst = append(dst, `{"model_name":`...)
	dst = appendJSONString(dst, []byte(r.ModelName))
	dst = append(dst, `,"model_version":`...)
	dst = appendJSONString(dst, []byte(r.ModelVersion))
	if r.ID != "" {
		dst = append(dst, `,"id":`...)
		dst = appendJSONString(dst, []byte(r.ID))
	}
	if len(r.Parameters) > 0 {
		dst = append(dst, `,"parameters":`...)
		if dst, err = appendParameters(dst, r.Parameters, -1); err != nil {
			return dst, 0, fmt.Errorf("response parameters: %w", err)
		}
	}
	dst = append(dst, `,"outputs":[`...)
	for i := range r.Outputs {
		t := &r.Outputs[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		bin := t.Binary && !t.SharedMemory()
		if dst, err = appendTensor(dst, t, bin, false); err != nil {
			return dst, 0, fmt.Errorf("output %q: %w", t.Name, err)
		}
		if bin {
			binaryLen += len(t.Data)
		}
	}
	return append(dst, "]}"...), binaryLen, nil
}

var headerPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Shared, never modified header values.
var (
	contentTypeJSON   = []string{"application/json"}
	contentTypeBinary = []string{"application/octet-stream"}
)

// WriteResponse writes r to w as Triton does: status 200, Content-Type
// application/json for plain JSON or application/octet-stream with
// Inference-Header-Content-Length when outputs are binary. Binary outputs
// are written from their own buffers, not copied.
func WriteResponse(w http.ResponseWriter, r *Response) error {
	bp := headerPool.Get().(*[]byte)
	defer headerPool.Put(bp)
	header, binLen, err := AppendResponseHeader((*bp)[:0], r)
	*bp = header
	if err != nil {
		return err
	}
	// Canonical keys set directly: Header.Set would canonicalise and
	// allocate on every response.
	h := w.Header()
	if hasBinaryOutput(r) {
		h["Content-Type"] = contentTypeBinary
		h[HeaderContentLength] = []string{strconv.Itoa(len(header))}
	} else {
		h["Content-Type"] = contentTypeJSON
	}
	h["Content-Length"] = []string{strconv.Itoa(len(header) + binLen)}
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(header); err != nil {
		return err
	}
	for i := range r.Outputs {
		if t := &r.Outputs[i]; t.Binary && !t.SharedMemory() && len(t.Data) > 0 {
			if _, err := w.Write(t.Data); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendTensor writes one tensor object. In binary form its parameters get
// binary_data_size; otherwise its data goes inline (none for shared memory).
// strictUTF8 refuses BYTES elements that JSON cannot carry: set for
// requests, whose data must reach the model unchanged; responses instead
// get U+FFFD as from encoding/json.
func appendTensor(dst []byte, t *Tensor, bin, strictUTF8 bool) ([]byte, error) {
	if !t.Datatype.Valid() {
		return dst, fmt.Errorf("unknown datatype %q", t.Datatype)
	}
	n, err := ElementCount(t.Shape)
	if err != nil {
		return dst, err
	}
	if t.Deferred() {
		return dst, errDeferred
	}
	shm := t.SharedMemory()
	if !shm {
		if err := checkData(t.Datatype, t.Shape, n, t.Data); err != nil {
			return dst, err
		}
	}
	dst = append(dst, `{"name":`...)
	dst = appendJSONString(dst, []byte(t.Name))
	dst = append(dst, `,"datatype":"`...)
	dst = append(dst, t.Datatype...)
	dst = append(dst, `","shape":`...)
	dst = appendShape(dst, t.Shape)
	binSize := int64(-1)
	if bin {
		binSize = int64(len(t.Data))
	}
	if len(t.Parameters) > 0 || binSize >= 0 {
		dst = append(dst, `,"parameters":`...)
		if dst, err = appendParameters(dst, t.Parameters, binSize); err != nil {
			return dst, err
		}
	}
	if !bin && !shm {
		dst = append(dst, `,"data":`...)
		if dst, err = appendJSONData(dst, t.Datatype, t.Data, strictUTF8); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

func appendShape(dst []byte, shape []int64) []byte {
	dst = append(dst, '[')
	for i, d := range shape {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, d, 10)
	}
	return append(dst, ']')
}

// appendParameters writes p as a JSON object with its keys sorted (so equal
// parameters encode to equal bytes), followed by binary_data_size when
// binSize >= 0 (any binary_data_size already in p is dropped: the codec
// owns it).
func appendParameters(dst []byte, p Parameters, binSize int64) ([]byte, error) {
	return appendParamsEdited(dst, p, binSize)
}

// paramEdit changes one key of a parameter object as it is written: a nil
// value drops the key, any other sets it.
type paramEdit struct {
	key   string
	value any
}

// appendParamsEdited is appendParameters for p changed by edits (distinct
// keys, none of them binary_data_size). The batch key and the batched
// request write a caller's parameters with a key or two changed; editing on
// the way out spares copying every caller's map to change it.
func appendParamsEdited(dst []byte, p Parameters, binSize int64, edits ...paramEdit) ([]byte, error) {
	var arr [8]string
	keys := arr[:0]
	for k := range p {
		if k != ParamBinaryDataSize && !slices.ContainsFunc(edits, func(e paramEdit) bool { return e.key == k }) {
			keys = append(keys, k)
		}
	}
	for _, e := range edits {
		if e.value != nil {
			keys = append(keys, e.key)
		}
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, []byte(k))
		dst = append(dst, ':')
		var v any
		edited := false
		for _, e := range edits {
			if e.key == k {
				v, edited = e.value, true
			}
		}
		if !edited {
			v = p[k]
		}
		var err error
		if dst, err = appendParamValue(dst, v); err != nil {
			return dst, fmt.Errorf("parameter %q: %w", k, err)
		}
	}
	if binSize >= 0 {
		if len(keys) > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `"binary_data_size":`...)
		dst = strconv.AppendInt(dst, binSize, 10)
	}
	return append(dst, '}'), nil
}

func appendParamValue(dst []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case bool:
		return strconv.AppendBool(dst, v), nil
	case string:
		return appendJSONString(dst, []byte(v)), nil
	case int64:
		return strconv.AppendInt(dst, v, 10), nil
	case int:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case int32:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case uint32:
		return strconv.AppendUint(dst, uint64(v), 10), nil
	case uint64:
		return strconv.AppendUint(dst, v, 10), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return dst, fmt.Errorf("%v has no JSON form", v)
		}
		return appendFloat(dst, v), nil
	case float32:
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return dst, fmt.Errorf("%v has no JSON form", v)
		}
		return appendFloat(dst, float64(v)), nil
	case RawJSON:
		if len(v) == 0 {
			return append(dst, "null"...), nil
		}
		return append(dst, v...), nil
	}
	return dst, fmt.Errorf("unsupported value type %T", v)
}

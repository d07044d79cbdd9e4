package kserve

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
)

// OutputBinary reports the form r wants output name in: the output's own
// binary_data when it names the output with one, else the request's
// binary_data_output, else JSON (false).
func (r *Request) OutputBinary(name string) bool {
	for i := range r.Outputs {
		if r.Outputs[i].Name == name {
			if v, ok := r.Outputs[i].Parameters.Bool(ParamBinaryData); ok {
				return v
			}
			break
		}
	}
	v, _ := r.Parameters.Bool(ParamBinaryDataOutput)
	return v
}

// WantsOutput reports whether r asks for output name: every output when it
// names none, else only those it names.
func (r *Request) WantsOutput(name string) bool {
	if len(r.Outputs) == 0 {
		return true
	}
	for i := range r.Outputs {
		if r.Outputs[i].Name == name {
			return true
		}
	}
	return false
}

// HalfInJSON reports whether r carries FP16 or BF16 values as JSON numbers,
// or asks for one of halfOutputs (a model's FP16 and BF16 outputs) in JSON.
// Triton refuses both ways, so such a request reaches it only re-encoded
// in binary form, and its answer comes back to JSON through the proxy.
func (r *Request) HalfInJSON(halfOutputs []string) bool {
	for i := range r.Inputs {
		t := &r.Inputs[i]
		if t.Datatype.Half() && !t.Binary && !t.SharedMemory() {
			return true
		}
	}
	for _, name := range halfOutputs {
		if r.WantsOutput(name) && !r.OutputBinary(name) {
			return true
		}
	}
	return false
}

// Rows is the number of batch rows r carries: dimension 0 of every input,
// which must agree.
func Rows(r *Request) (int64, error) {
	if len(r.Inputs) == 0 {
		return 0, errors.New("request has no inputs")
	}
	var rows int64
	for i := range r.Inputs {
		t := &r.Inputs[i]
		if len(t.Shape) == 0 {
			return 0, fmt.Errorf("input %q: shape [] has no batch dimension", t.Name)
		}
		if i == 0 {
			rows = t.Shape[0]
		} else if t.Shape[0] != rows {
			return 0, fmt.Errorf("input %q: dimension 0 is %d, input %q has %d", t.Name, t.Shape[0], r.Inputs[0].Name, rows)
		}
	}
	return rows, nil
}

// Request-level parameters that tie a request to server-side state.
var sequenceParams = []string{ParamSequenceID, ParamSequenceStart, ParamSequenceEnd}

// BatchKey returns the key under which r may share a batch: requests with
// equal keys (for the same model) agree on input names, datatypes, non-batch
// dimensions and input parameters, on request parameters, and on outputs
// requested with options that change what the server computes (such as
// classification). Which outputs a caller wants and in which form (JSON or
// binary) do not enter the key: the batch asks for their union in binary and
// Split serves each caller. batchable is false for requests that must go to
// the server alone (see appendBatchKey for the reasons). rows is r's
// dimension 0, which deriving the key has checked: callers need not count
// it again.
func BatchKey(r *Request) (key string, rows int64, batchable bool) {
	bp := keyBuffers.Get().(*[]byte)
	defer keyBuffers.Put(bp)
	b, rows, err := appendBatchKey((*bp)[:0], r)
	*bp = b[:0]
	if err != nil {
		return "", 0, false
	}
	// Interned: the calls of one model repeat a handful of keys, which the
	// dispatcher keeps as long as their calls queue.
	return intern(b), rows, true
}

// keyBuffers are scratch space for keys: a key is built once per request.
var keyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// appendBatchKey appends r's batch key (see BatchKey) to dst and returns
// r's rows, or says why r cannot be batched: shared-memory tensors,
// sequence parameters, inputs without a common batch dimension, no rows,
// duplicate names.
func appendBatchKey(dst []byte, r *Request) ([]byte, int64, error) {
	rows, err := Rows(r)
	if err != nil {
		return dst, 0, err
	}
	if rows < 1 {
		return dst, 0, fmt.Errorf("request has no rows (dimension 0 is %d)", rows)
	}
	for _, k := range sequenceParams {
		if _, ok := r.Parameters[k]; ok {
			return dst, 0, fmt.Errorf("request belongs to a sequence (parameter %q)", k)
		}
	}
	dst = append(dst, 'P')
	if dst, err = appendParamsEdited(dst, r.Parameters, -1, paramEdit{key: ParamBinaryDataOutput}, paramEdit{key: ParamTimeout}); err != nil {
		return dst, 0, fmt.Errorf("request parameters: %w", err)
	}
	var arr [8]int
	order := sortedIndex(arr[:0], len(r.Inputs), func(i int) string { return r.Inputs[i].Name })
	for n, i := range order {
		t := &r.Inputs[i]
		if n > 0 && r.Inputs[order[n-1]].Name == t.Name {
			return dst, 0, fmt.Errorf("input %q appears twice", t.Name)
		}
		if t.SharedMemory() {
			return dst, 0, fmt.Errorf("input %q is in shared memory", t.Name)
		}
		dst = append(dst, 'I')
		dst = appendJSONString(dst, []byte(t.Name))
		dst = append(dst, t.Datatype...)
		dst = appendShape(dst, t.Shape[1:])
		if dst, err = appendParameters(dst, t.Parameters, -1); err != nil {
			return dst, 0, fmt.Errorf("input %q: %w", t.Name, err)
		}
	}
	order = sortedIndex(order[:0], len(r.Outputs), func(i int) string { return r.Outputs[i].Name })
	for n, i := range order {
		o := &r.Outputs[i]
		if n > 0 && r.Outputs[order[n-1]].Name == o.Name {
			return dst, 0, fmt.Errorf("output %q requested twice", o.Name)
		}
		if _, ok := o.Parameters[ParamSharedMemRegion]; ok {
			return dst, 0, fmt.Errorf("output %q is requested into shared memory", o.Name)
		}
		if !computeOptions(o.Parameters) {
			continue
		}
		dst = append(dst, 'O')
		dst = appendJSONString(dst, []byte(o.Name))
		if dst, err = appendParamsEdited(dst, o.Parameters, -1, paramEdit{key: ParamBinaryData}); err != nil {
			return dst, 0, fmt.Errorf("output %q: %w", o.Name, err)
		}
	}
	return dst, rows, nil
}

// computeOptions reports whether output parameters hold anything besides
// binary_data, i.e. options that may change what the server computes.
func computeOptions(p Parameters) bool {
	for k := range p {
		if k != ParamBinaryData {
			return true
		}
	}
	return false
}

// sortedIndex returns the indexes 0..n-1 ordered by name.
func sortedIndex(dst []int, n int, name func(int) string) []int {
	for i := range n {
		dst = append(dst, i)
	}
	slices.SortStableFunc(dst, func(a, b int) int {
		switch na, nb := name(a), name(b); {
		case na < nb:
			return -1
		case na > nb:
			return 1
		}
		return 0
	})
	return dst
}

// Caller is one request's share of a batch: rows [Start, Start+Rows).
type Caller struct {
	ID    string
	Start int64
	Rows  int64
}

// Batch is N requests merged along dimension 0 into one batched request.
// The batched body is encoded by AppendBody, which copies each caller's
// input bytes once; Split cuts the batched response back into N responses.
type Batch struct {
	Callers []Caller // in the order given to Merge
	Rows    int64    // sum of the callers' rows

	reqs   []*Request
	header []byte   // JSON header of the batched request
	parts  [][]byte // input data in body order: for each input, each caller's bytes
	binLen int
}

// Merge concatenates requests that share a batch key along dimension 0. The
// batched request asks for the union of the outputs the callers want, all in
// binary form (all outputs when any caller named none); its parameters are
// the callers' common ones with binary_data_output true and timeout the
// smallest any caller set. The requests must stay untouched until Split.
func Merge(reqs []*Request) (*Batch, error) { return merge(reqs, true) }

// MergeSameKey is Merge for requests already grouped by BatchKey, as a
// dispatcher queue holds them: it skips deriving their keys again, which
// is most of Merge's cost for small tensors. The caller vouches that
// BatchKey found every request batchable under one key; MergeSameKey still
// checks what it needs not to fail (rows, and every input in every
// request), so a broken promise gives an error or a batch Triton refuses.
func MergeSameKey(reqs []*Request) (*Batch, error) { return merge(reqs, false) }

func merge(reqs []*Request, verify bool) (*Batch, error) {
	if len(reqs) == 0 {
		return nil, errors.New("merge: no requests")
	}
	b := &Batch{Callers: make([]Caller, len(reqs)), reqs: reqs}
	if err := b.addCallers(verify); err != nil {
		return nil, err
	}
	first := reqs[0]
	b.parts = make([][]byte, len(first.Inputs)*len(reqs))
	h := make([]byte, 0, 256+128*len(first.Inputs))
	h = append(h, `{"parameters":`...)
	h, err := appendParamsEdited(h, first.Parameters, -1, paramEdit{ParamBinaryDataOutput, true}, paramEdit{ParamTimeout, batchTimeout(reqs)})
	if err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	h = append(h, `,"inputs":[`...)
	for k := range first.Inputs {
		if k > 0 {
			h = append(h, ',')
		}
		if h, err = b.appendInput(h, k); err != nil {
			return nil, err
		}
	}
	h = append(h, ']')
	if h, err = appendOutputs(h, unionOutputs(reqs)); err != nil {
		return nil, err
	}
	b.header = append(h, '}')
	return b, nil
}

// addCallers gives each request its rows of the batch (b.Callers, b.Rows).
// With verify, each request's batch key must be the first one's; without,
// only its rows are read.
func (b *Batch) addCallers(verify bool) error {
	var key0, scratch []byte
	for i, r := range b.reqs {
		var rows int64
		var err error
		switch {
		case !verify:
			if rows, err = Rows(r); err == nil && rows < 1 {
				err = fmt.Errorf("request has no rows (dimension 0 is %d)", rows)
			}
		case i == 0:
			key0, rows, err = appendBatchKey(nil, r)
		default:
			scratch, rows, err = appendBatchKey(scratch[:0], r)
			if err == nil && !bytes.Equal(scratch, key0) {
				return fmt.Errorf("merge: request %d (id %q) differs from request 0 in inputs, parameters or output options", i, r.ID)
			}
		}
		if err != nil {
			return fmt.Errorf("merge: request %d (id %q) cannot be batched: %w", i, r.ID, err)
		}
		b.Callers[i] = Caller{ID: r.ID, Start: b.Rows, Rows: rows}
		b.Rows += rows
	}
	return nil
}

// appendInput appends the batched request's header of input k (the first
// request's k-th, the batch's rows in dimension 0, its data's size in
// binary form) to h, and takes each caller's data of it into b.parts.
func (b *Batch) appendInput(h []byte, k int) ([]byte, error) {
	reqs := b.reqs
	in := &reqs[0].Inputs[k]
	size := 0
	for i, r := range reqs {
		t := r.input(in.Name, k)
		if t == nil {
			return h, fmt.Errorf("merge: request %d (id %q) has no input %q", i, r.ID, in.Name)
		}
		if t.Deferred() {
			return h, fmt.Errorf("merge: request %d (id %q): input %q: %w", i, r.ID, t.Name, errDeferred)
		}
		if err := checkData(t.Datatype, t.Shape, mustCount(t.Shape), t.Data); err != nil {
			return h, fmt.Errorf("merge: request %d (id %q): input %q: %w", i, r.ID, t.Name, err)
		}
		b.parts[k*len(reqs)+i] = t.Data
		size += len(t.Data)
	}
	b.binLen += size
	h = append(h, `{"name":`...)
	h = appendJSONString(h, []byte(in.Name))
	h = append(h, `,"datatype":"`...)
	h = append(h, in.Datatype...)
	h = append(h, `","shape":[`...)
	h = strconv.AppendInt(h, b.Rows, 10)
	for _, d := range in.Shape[1:] {
		h = append(h, ',')
		h = strconv.AppendInt(h, d, 10)
	}
	h = append(h, ']')
	h = append(h, `,"parameters":`...)
	h, err := appendParameters(h, in.Parameters, int64(size))
	if err != nil {
		return h, fmt.Errorf("merge: input %q: %w", in.Name, err)
	}
	return append(h, '}'), nil
}

// appendOutputs appends the batched request's outputs, each asked for in
// binary form, to h; none when outs is empty (every output).
func appendOutputs(h []byte, outs []RequestedOutput) ([]byte, error) {
	if len(outs) == 0 {
		return h, nil
	}
	h = append(h, `,"outputs":[`...)
	for i, o := range outs {
		if i > 0 {
			h = append(h, ',')
		}
		h = append(h, `{"name":`...)
		h = appendJSONString(h, []byte(o.Name))
		h = append(h, `,"parameters":`...)
		var err error
		if h, err = appendParamsEdited(h, o.Parameters, -1, paramEdit{ParamBinaryData, true}); err != nil {
			return h, fmt.Errorf("merge: output %q: %w", o.Name, err)
		}
		h = append(h, '}')
	}
	return append(h, ']'), nil
}

// input finds the input called name, trying index k first (callers usually
// list inputs in the same order), or nil when r has none of that name.
func (r *Request) input(name string, k int) *Tensor {
	if k < len(r.Inputs) && r.Inputs[k].Name == name {
		return &r.Inputs[k]
	}
	for i := range r.Inputs {
		if r.Inputs[i].Name == name {
			return &r.Inputs[i]
		}
	}
	return nil
}

func mustCount(shape []int64) int64 {
	n, err := ElementCount(shape)
	if err != nil {
		return -1 // checkData then reports the mismatch
	}
	return n
}

// batchTimeout is the batched request's timeout: the smallest any caller
// set, or nil (none) when no caller set one. A timeout of 0 is none, as
// Triton reads it, and one above what an int64 holds is the int64's
// largest: a batch never carries a wrapped value.
func batchTimeout(reqs []*Request) any {
	var least any
	for _, r := range reqs {
		if t, ok := r.Parameters.Uint(ParamTimeout); ok && t > 0 {
			t := int64(min(t, math.MaxInt64))
			if cur, set := least.(int64); !set || t < cur {
				least = t
			}
		}
	}
	return least
}

// unionOutputs lists the outputs the batch must ask for, with the
// parameters of the first caller naming each, or nil when some caller
// wants all outputs. merge writes each with binary_data true.
func unionOutputs(reqs []*Request) []RequestedOutput {
	var outs []RequestedOutput
	for _, r := range reqs {
		if len(r.Outputs) == 0 {
			return nil
		}
	next:
		for _, o := range r.Outputs {
			for _, have := range outs {
				if have.Name == o.Name {
					continue next
				}
			}
			outs = append(outs, o)
		}
	}
	return outs
}

// BodyLen is the length of the batched body AppendBody writes.
func (b *Batch) BodyLen() int { return len(b.header) + b.binLen }

// AppendBody appends the batched request in binary form: the JSON header,
// then every input's bytes, each caller's in turn (the one copy merging
// costs). headerLen is the value for Inference-Header-Content-Length.
func (b *Batch) AppendBody(dst []byte) (body []byte, headerLen int) {
	dst = slices.Grow(dst, b.BodyLen())
	dst = append(dst, b.header...)
	for _, p := range b.parts {
		dst = append(dst, p...)
	}
	return dst, len(b.header)
}

// WriteTo writes the same body as AppendBody straight from the callers'
// buffers, copying nothing on the way (a net.Conn gets one writev), so a
// streaming client can send the batch without building it; it implements
// io.WriterTo. Set Content-Length to BodyLen and
// Inference-Header-Content-Length to HeaderLen.
func (b *Batch) WriteTo(w io.Writer) (int64, error) {
	bufs := make(net.Buffers, 0, 1+len(b.parts))
	bufs = append(bufs, b.header)
	for _, p := range b.parts {
		if len(p) > 0 {
			bufs = append(bufs, p)
		}
	}
	return bufs.WriteTo(w)
}

// Reader returns the batched body as an io.Reader for clients that take a
// body stream of known size (e.g. fasthttp's SetBodyStream with BodyLen).
// It also implements io.WriterTo, so io.Copy and its kin write the callers'
// buffers straight out instead of reading them through a buffer.
func (b *Batch) Reader() io.Reader { return &bodyReader{b: b} }

type bodyReader struct {
	b   *Batch
	i   int // 0: header, 1..: parts[i-1]
	off int
}

func (r *bodyReader) cur() []byte {
	if r.i == 0 {
		return r.b.header
	}
	return r.b.parts[r.i-1]
}

func (r *bodyReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && r.i <= len(r.b.parts) {
		c := r.cur()
		k := copy(p[n:], c[r.off:])
		n += k
		r.off += k
		if r.off == len(c) {
			r.i++
			r.off = 0
		}
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (r *bodyReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for ; r.i <= len(r.b.parts); r.i, r.off = r.i+1, 0 {
		c := r.cur()[r.off:]
		if len(c) == 0 {
			continue
		}
		n, err := w.Write(c)
		total += int64(n)
		if err != nil {
			r.off += n
			return total, err
		}
	}
	return total, nil
}

// HeaderLen is the length of the batched body's JSON header, the value for
// Inference-Header-Content-Length.
func (b *Batch) HeaderLen() int { return len(b.header) }

// Split cuts the batched response into one response per caller, in the
// order of Callers: each carries the caller's ID, the outputs it asked for
// (all when it named none) with dimension 0 set to its rows and Data sliced
// from resp without copying, each flagged binary or JSON as that caller
// asked. resp must stay untouched while the responses are in use.
//
// An answer naming one output twice is refused: a caller that asked for
// it by name could be given either.
//
// Split stays one function: it cuts the callers' outputs and shapes from two
// arrays sized once for all callers, and its steps share those arrays and
// offsets.
func (b *Batch) Split(resp *Response) ([]*Response, error) {
	var arr [8]int
	order := sortedIndex(arr[:0], len(resp.Outputs), func(i int) string { return resp.Outputs[i].Name })
	for n := 1; n < len(order); n++ {
		if name := resp.Outputs[order[n]].Name; name == resp.Outputs[order[n-1]].Name {
			return nil, fmt.Errorf("split: output %q appears twice in the answer", name)
		}
	}
	n := len(b.Callers)
	// bounds[j*(n+1)+c] is the byte offset where caller c's rows of output j start.
	bounds := make([]int, len(resp.Outputs)*(n+1))
	for j := range resp.Outputs {
		if err := b.cut(&resp.Outputs[j], bounds[j*(n+1):(j+1)*(n+1)]); err != nil {
			return nil, fmt.Errorf("split: output %q: %w", resp.Outputs[j].Name, err)
		}
	}
	ranks := 0
	for j := range resp.Outputs {
		ranks += len(resp.Outputs[j].Shape)
	}
	all := make([]Response, n)
	out := make([]*Response, n)
	// The callers' outputs and shapes are cut from two arrays, not two
	// per caller; each caller's part is capped, so appends stay in it.
	wants := func(req *Request) int {
		if len(req.Outputs) == 0 {
			return len(resp.Outputs)
		}
		return len(req.Outputs)
	}
	tensors := 0
	for _, req := range b.reqs {
		tensors += wants(req)
	}
	allOuts := make([]Tensor, tensors)
	allShapes := make([]int64, n*ranks)
	for c := range b.Callers {
		req := b.reqs[c]
		want := wants(req)
		shapes := allShapes[:0:ranks]
		outs := allOuts[:0:want]
		allShapes, allOuts = allShapes[ranks:], allOuts[want:]
		add := func(j int) {
			src := &resp.Outputs[j]
			lo, hi := bounds[j*(n+1)+c], bounds[j*(n+1)+c+1]
			at := len(shapes)
			shapes = append(shapes, b.Callers[c].Rows)
			shapes = append(shapes, src.Shape[1:]...)
			outs = append(outs, Tensor{
				Name:       src.Name,
				Datatype:   src.Datatype,
				Shape:      shapes[at:len(shapes):len(shapes)],
				Parameters: src.Parameters.Clone(),
				Data:       src.Data[lo:hi:hi],
				Binary:     req.OutputBinary(src.Name),
			})
		}
		if len(req.Outputs) == 0 {
			for j := range resp.Outputs {
				add(j)
			}
		} else {
			for _, o := range req.Outputs {
				j := slices.IndexFunc(resp.Outputs, func(t Tensor) bool { return t.Name == o.Name })
				if j < 0 {
					return nil, fmt.Errorf("split: output %q requested by caller %d (id %q) is missing from the batched response", o.Name, c, req.ID)
				}
				add(j)
			}
		}
		all[c] = Response{
			ModelName:    resp.ModelName,
			ModelVersion: resp.ModelVersion,
			ID:           req.ID,
			Parameters:   resp.Parameters.Clone(),
			Outputs:      outs,
		}
		out[c] = &all[c]
	}
	return out, nil
}

// cut checks one batched output and fills bounds with the byte offset of
// each caller's first row, plus the end.
func (b *Batch) cut(t *Tensor, bounds []int) error {
	if t.SharedMemory() {
		return errors.New("is in shared memory; batched outputs must come back in the body")
	}
	if len(t.Shape) == 0 || t.Shape[0] != b.Rows {
		return fmt.Errorf("shape %s does not have the batch's %d rows in dimension 0", FormatShape(t.Shape), b.Rows)
	}
	n, err := ElementCount(t.Shape)
	if err != nil {
		return err
	}
	if err := checkData(t.Datatype, t.Shape, n, t.Data); err != nil {
		return err
	}
	rowElems := int64(0)
	if b.Rows > 0 {
		rowElems = n / b.Rows
	}
	if size := int64(t.Datatype.Size()); size > 0 {
		for c, cl := range b.Callers {
			bounds[c] = int(cl.Start * rowElems * size)
		}
		bounds[len(b.Callers)] = len(t.Data)
		return nil
	}
	// BYTES: walk the elements, noting the offset at each caller's first row.
	off, elem := 0, int64(0)
	for c, cl := range b.Callers {
		for target := cl.Start * rowElems; elem < target; elem++ {
			off += 4 + int(binary.LittleEndian.Uint32(t.Data[off:]))
		}
		bounds[c] = off
	}
	bounds[len(b.Callers)] = len(t.Data)
	return nil
}

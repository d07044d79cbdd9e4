package emulator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/kserve"
)

// handleInfer serves POST /v2/models/{m}[/versions/{v}]/infer: decode,
// then execute (validate against the model, wait for an instance in FIFO
// order, run the batch for tau(b) on the emulated device, compute the
// outputs) and encode them in the form the caller asked for.
func (s *Server) handleInfer(w http.ResponseWriter, r *http.Request, m *model) {
	start := s.clock.Now()
	if !m.ready.Load() {
		kserve.WriteError(w, http.StatusNotFound, notReady(m))
		return
	}
	fail := func(status int, msg string) {
		m.stats.fail(s.clock.Now().Sub(start))
		kserve.WriteError(w, status, msg)
	}

	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		fail(http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Encoding %q is not supported by the emulator; send the body uncompressed", enc))
		return
	}

	buf := getBuffer(r.ContentLength)
	defer putBuffer(buf)
	body, err := readBody(w, r, s.opts.MaxBodyBytes, (*buf)[:0])
	*buf = body
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds the emulator's limit of %d bytes", tooBig.Limit))
			return
		}
		fail(http.StatusBadRequest, "reading the request body: "+err.Error())
		return
	}
	// compute_input starts once the body is in, as Triton's does: reading
	// it is the network's time, not the model's.
	received := s.clock.Now()
	req, err := decode(r.Header.Get(kserve.HeaderContentLength), body)
	if err != nil {
		fail(kserve.ErrorStatus(err), err.Error())
		return
	}
	err = s.execute(r.Context(), m, req, exchange{start: start, received: received, inBytes: len(body),
		write: func(resp *kserve.Response) error { return kserve.WriteResponse(w, resp) }})
	switch {
	case errors.Is(err, errDrop):
		dropConnection(w)
	case errors.Is(err, errNobody):
	case err != nil:
		kserve.WriteError(w, kserve.ErrorStatus(err), err.Error())
	}
}

func notReady(m *model) string {
	return fmt.Sprintf("Request for unknown model: '%s' has no available versions", m.name)
}

// exchange is what execute needs of the door a request came through.
type exchange struct {
	start, received time.Time // the request's arrival, and when its body was in
	inBytes         int       // the request's size, for Realism's transfer cost
	// write sends the answer; an error means the client went away.
	write func(*kserve.Response) error
}

// execute runs one decoded request as Triton would: bind its inputs to the
// model, spend Realism's cost outside the batch, queue for an instance,
// run the batch, answer through x.write, and record the execution in the
// model's statistics. A failure is recorded too and returned: a
// *kserve.Error for the client, errDrop when a fault drops the connection,
// errNobody when nobody is left to answer.
func (s *Server) execute(ctx context.Context, m *model, req *kserve.Request, x exchange) error {
	fail := func(err error) error {
		m.stats.fail(s.clock.Now().Sub(x.start))
		return err
	}
	rows, ins, err := m.bindInputs(req)
	if err != nil {
		return fail(err)
	}
	sel, err := m.selectOutputs(req)
	if err != nil {
		return fail(err)
	}
	inputDone := s.clock.Now()
	// Realism's cost outside the batch: the request's share of the
	// overhead and its transfer, spent before it queues for an instance.
	if err := s.outside(ctx, s.opts.Realism.transfer(x.inBytes)); err != nil {
		return fail(errNobody)
	}
	ready := s.clock.Now()

	if err := m.pool.acquire(ctx); err != nil {
		return fail(errNobody) // the client left while queued
	}
	queued := s.clock.Now()
	infer, fault, err := s.runBatch(ctx, m, rows, req.ID)
	switch {
	case errors.Is(err, errClientGone):
		return fail(errNobody)
	case err != nil:
		return fail(&kserve.Error{Status: http.StatusServiceUnavailable, Msg: err.Error()})
	case fault.Drop:
		return fail(errDrop)
	case fault.Status != 0:
		status, msg := fault.Status, fault.Message
		if status < 400 || status > 599 {
			status, msg = http.StatusInternalServerError, fmt.Sprintf("fault status %d is not an HTTP error status (400-599): %s", fault.Status, msg)
		}
		return fail(&kserve.Error{Status: status, Msg: msg})
	}

	computed := s.clock.Now()
	resp := &kserve.Response{ModelName: m.name, ModelVersion: modelVersion, ID: req.ID, Outputs: m.run(rows, ins, sel)}
	sleepStart := s.clock.Now()
	if err := s.outside(ctx, s.opts.Realism.transfer(m.outputBytes(rows))); err != nil {
		return fail(errNobody)
	}
	slept := s.clock.Now().Sub(sleepStart)
	if err := x.write(resp); err != nil {
		// Encoding our own outputs cannot fail, so the client went away.
		return fail(errNobody)
	}
	outputDone := s.clock.Now()
	// The statistics describe the batch as Triton's do: the time outside
	// it (Realism's overhead and transfer) is in the total only.
	m.stats.success(execution{
		end:   outputDone,
		rows:  rows,
		total: outputDone.Sub(x.start),
		queue: queued.Sub(ready),
		input: inputDone.Sub(x.received),
		infer: infer,
		out:   max(outputDone.Sub(computed)-slept, 0),
	})
	return nil
}

// runBatch holds an instance (already acquired) for the batch and gives it
// back. It returns the execution time, or the fault that replaced the
// execution, or an error when the server closed meanwhile.
func (s *Server) runBatch(ctx context.Context, m *model, rows int, id string) (time.Duration, Fault, error) {
	defer m.pool.release()
	info := BatchInfo{Model: m.name, Rows: rows, Seq: s.seq.Add(1), RequestID: id}
	var f Fault
	if s.opts.Fault != nil {
		f = s.opts.Fault(info)
	}
	// A device does not stop because its caller left: only the server
	// closing ends a delay or an execution early.
	life := s.lifeContext()
	if f.Delay > 0 {
		if err := s.clock.Sleep(life, f.Delay); err != nil {
			return 0, f, errClosing
		}
	}
	switch {
	case f.Hang:
		select {
		case <-ctx.Done():
			return 0, f, errClientGone
		case <-life.Done():
			return 0, f, errClosing
		}
	case f.Drop, f.Status != 0:
		return 0, f, nil
	}

	d := s.execTime(m, rows)
	run := s.gpu.begin(d, s.batchEnergyMJ(m, rows))
	err := s.clock.Sleep(life, d)
	s.gpu.end(run)
	if err != nil {
		return 0, f, errClosing
	}
	// The emulated device took d. A loaded host wakes the sleeper later
	// than that; the delay is the host's, like the proxy's own, and shows in
	// the round trip, not in the device's compute time.
	return d, f, nil
}

// outside spends d of Realism's time outside the batch; it ends early, with
// an error, when the client leaves (ctx) or the server closes.
func (s *Server) outside(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.lifeContext(), cancel)
	defer stop()
	return s.clock.Sleep(ctx, d)
}

var (
	errClosing    = errors.New("the server is shutting down; the batch did not complete")
	errClientGone = errors.New("the client went away")
	// errNobody: the request failed with nobody left to answer it.
	errNobody = errors.New("the client went away before its answer")
	// errDrop: a fault asked for the connection to be dropped unanswered.
	errDrop = errors.New("the connection is dropped without an answer, as a crashed server's")
)

// dropConnection closes the client connection without a response, as a
// crashed server would.
func dropConnection(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
		return
	}
	// Not hijackable (HTTP/2, a recorder): net/http's own way to abort.
	panic(http.ErrAbortHandler)
}

func badRequest(format string, args ...any) error {
	return &kserve.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf(format, args...)}
}

func decode(headerLen string, body []byte) (*kserve.Request, error) {
	hl, err := kserve.ParseHeaderLength(headerLen, len(body))
	if err != nil {
		return nil, err
	}
	return kserve.DecodeRequest(body, hl)
}

// readBody reads the whole body into dst, refusing more than limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, dst []byte) ([]byte, error) {
	if r.ContentLength > limit {
		return dst, &http.MaxBytesError{Limit: limit}
	}
	if n := r.ContentLength; n > 0 && int64(cap(dst)) < n {
		dst = make([]byte, 0, n)
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := body.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// buffers recycles request bodies up to maxPooledBuffer; largeBuffers
// the larger ones. A fresh 60 MB buffer costs its zeroing and page faults
// (more host CPU than a GPU server spends on the body), so a stream of
// large requests reuses them; a sync.Pool is emptied after two
// collections without use, so a burst of them does not pin memory.
var (
	buffers      = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}
	largeBuffers sync.Pool
)

const maxPooledBuffer = 4 << 20

// getBuffer returns an empty buffer for a body of declared length n (-1:
// unknown).
func getBuffer(n int64) *[]byte {
	if n <= maxPooledBuffer {
		return buffers.Get().(*[]byte)
	}
	if b, ok := largeBuffers.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		return b
	}
	b := make([]byte, 0, n)
	return &b
}

func putBuffer(b *[]byte) {
	*b = (*b)[:0]
	if cap(*b) <= maxPooledBuffer {
		buffers.Put(b)
	} else {
		largeBuffers.Put(b)
	}
}

// bindInputs checks the request's inputs against the model and returns the
// batch size and the inputs' data in the model's input order.
func (m *model) bindInputs(req *kserve.Request) (int, [][]byte, error) {
	ins := make([][]byte, len(m.inputs))
	rows, rowsFrom := -1, ""
	for i := range req.Inputs {
		t := &req.Inputs[i]
		j := slices.IndexFunc(m.inputs, func(s tensorSpec) bool { return s.name == t.Name })
		if j < 0 {
			return 0, nil, badRequest("unexpected inference input '%s' for model '%s'", t.Name, m.name)
		}
		spec := m.inputs[j]
		if ins[j] != nil {
			return 0, nil, badRequest("input '%s' appears more than once in the request for model '%s'", t.Name, m.name)
		}
		if t.SharedMemory() {
			return 0, nil, badRequest("input '%s' uses shared memory, which the emulator does not support; send the data in the body", t.Name)
		}
		if t.Datatype != spec.datatype {
			return 0, nil, badRequest("inference input '%s' data-type is '%s', but model '%s' expects '%s'", t.Name, t.Datatype, m.name, spec.datatype)
		}
		n, err := m.rowsOf(spec, t.Shape)
		if err != nil {
			return 0, nil, err
		}
		if rows >= 0 && n != rows {
			return 0, nil, badRequest("input '%s' has batch size %d but input '%s' has %d; all inputs of model '%s' need the same batch size", t.Name, n, rowsFrom, rows, m.name)
		}
		rows, rowsFrom = n, t.Name
		if want := n * spec.rowBytes(); len(t.Data) != want {
			return 0, nil, badRequest("input '%s' has %d bytes of data, shape %s of %s needs %d", t.Name, len(t.Data), kserve.FormatShape(t.Shape), spec.datatype, want)
		}
		ins[j] = t.Data
	}
	for j, in := range ins {
		if in == nil {
			return 0, nil, badRequest("expected %d inputs but got %d inputs for model '%s': input '%s' is missing", len(m.inputs), len(req.Inputs), m.name, m.inputs[j].name)
		}
	}
	return rows, ins, nil
}

// rowsOf checks one input's shape and returns its batch size (1 for a
// model that does not batch).
func (m *model) rowsOf(spec tensorSpec, shape []int64) (int, error) {
	dims := shape
	if m.batching() {
		if len(shape) > 0 {
			dims = shape[1:]
		}
	}
	if (m.batching() && len(shape) == 0) || !slices.Equal(dims, spec.dims) {
		return 0, badRequest("unexpected shape for input '%s' for model '%s'. Expected %s, got %s",
			spec.name, m.name, kserve.FormatShape(m.shape(spec)), kserve.FormatShape(shape))
	}
	if !m.batching() {
		return 1, nil
	}
	switch b := shape[0]; {
	case b < 1:
		return 0, badRequest("input '%s' for model '%s' has batch size %d; it must be at least 1", spec.name, m.name, b)
	case b > int64(m.maxBatch):
		return 0, badRequest("inference request batch-size must be <= %d for '%s', got %d", m.maxBatch, m.name, b)
	default:
		return int(b), nil
	}
}

// outputSel is one output to return and its form.
type outputSel struct {
	index   int // into model.outputs
	binary  bool
	classes int // > 0: top-k classification instead of the tensor
}

// selectOutputs resolves the requested outputs (all of them when none are
// named) and whether each goes in the binary section: the output's
// binary_data parameter, else the request's binary_data_output, else JSON.
func (m *model) selectOutputs(req *kserve.Request) ([]outputSel, error) {
	if len(req.Outputs) == 0 {
		sel := make([]outputSel, len(m.outputs))
		for i, spec := range m.outputs {
			sel[i] = outputSel{index: i, binary: req.OutputBinary(spec.name)}
		}
		return sel, nil
	}
	sel := make([]outputSel, 0, len(req.Outputs))
	for i := range req.Outputs {
		o := &req.Outputs[i]
		j := slices.IndexFunc(m.outputs, func(s tensorSpec) bool { return s.name == o.Name })
		if j < 0 {
			return nil, badRequest("unexpected inference output '%s' for model '%s'", o.Name, m.name)
		}
		if slices.ContainsFunc(sel, func(s outputSel) bool { return s.index == j }) {
			return nil, badRequest("output '%s' is requested more than once for model '%s'", o.Name, m.name)
		}
		if _, shm := o.Parameters[kserve.ParamSharedMemRegion]; shm {
			return nil, badRequest("output '%s' asks for shared memory, which the emulator does not support", o.Name)
		}
		sel = append(sel, outputSel{index: j, binary: req.OutputBinary(o.Name), classes: o.Classification()})
	}
	return sel, nil
}

// run computes every output of the batch and returns the selected ones.
func (m *model) run(rows int, ins [][]byte, sel []outputSel) []kserve.Tensor {
	outs := make([][]byte, len(m.outputs))
	for i, spec := range m.outputs {
		outs[i] = make([]byte, rows*spec.rowBytes())
	}
	m.compute(rows, ins, outs)
	tensors := make([]kserve.Tensor, len(sel))
	for i, s := range sel {
		spec := m.outputs[s.index]
		t := kserve.Tensor{Name: spec.name, Datatype: spec.datatype, Data: outs[s.index], Binary: s.binary}
		if s.classes > 0 {
			var k int
			t.Datatype = kserve.Bytes
			t.Data, k = classify(spec.datatype, t.Data, rows, s.classes)
			t.Shape = []int64{int64(k)}
		} else {
			t.Shape = spec.dims
		}
		if m.batching() {
			t.Shape = append([]int64{int64(rows)}, t.Shape...)
		}
		tensors[i] = t
	}
	return tensors
}

// classify turns each row of a numeric output into its k largest elements
// as BYTES strings "value:index", highest first, the way Triton's
// classification extension reports them when the model has no labels.
func classify(dt kserve.Datatype, data []byte, rows, k int) ([]byte, int) {
	per := len(data) / 4 / rows
	k = min(k, per)
	var out []byte
	idx := make([]int, per)
	val := make([]float64, per)
	for r := range rows {
		row := data[r*per*4 : (r+1)*per*4]
		for i := range per {
			bits := binary.LittleEndian.Uint32(row[4*i:])
			if dt == kserve.FP32 {
				val[i] = float64(math.Float32frombits(bits))
			} else {
				val[i] = float64(int32(bits))
			}
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case val[a] > val[b]:
				return -1
			case val[a] < val[b]:
				return 1
			}
			return 0
		})
		for _, i := range idx[:k] {
			var s string
			if dt == kserve.FP32 {
				s = strconv.FormatFloat(val[i], 'f', 6, 64) + ":" + strconv.Itoa(i)
			} else {
				s = strconv.FormatInt(int64(val[i]), 10) + ":" + strconv.Itoa(i)
			}
			out = binary.LittleEndian.AppendUint32(out, uint32(len(s)))
			out = append(out, s...)
		}
	}
	return out, k
}

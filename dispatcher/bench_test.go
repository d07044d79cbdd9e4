package dispatcher_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/dispatcher/dispatchertest"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/kserve/kservetest"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/power"
	"github.com/ratebatch/ratebatch/whatif"
)

// The benchmarks here measure the dispatcher's share of a request's cost:
// Submit -> queue -> batch -> kserve.Merge -> Upstream.Infer ->
// DecodeResponse -> Split -> Release, one op per request, with callers
// submitting concurrently so that batches form as they do under load. The
// rule is adhoc's (work-conserving, up to max batch size) and the model has
// one instance, as the emulator and a default Triton model have.
//
// BenchmarkSubmit's upstream answers at once from prebuilt replies, after
// consuming the batched body as HTTPUpstream does (appended into a pooled
// buffer up to 64 KiB, streamed above), so the figures are the dispatcher's
// own. BenchmarkSubmitHTTP puts the real HTTPUpstream (fasthttp) and a
// loopback fasthttp server in between.
//
// Besides ns/op, B/op and allocs/op, each reports rows/batch (the mean batch
// size formed) and alloc-B/req-B: bytes allocated per request over the
// request's wire size; for image-sized requests it counts the copies of
// their bytes the path makes (0 here: the proxy's one copy is reading the
// body, outside the dispatcher).

// benchModel is a model as the benchmarks send to it: one row per request.
type benchModel struct {
	name     string
	maxBatch int
	inputs   []benchTensor
	outputs  []benchTensor // shape without the batch dimension
	binary   bool          // requests and answers in binary form
}

type benchTensor struct {
	name  string
	dt    kserve.Datatype
	shape []int64 // without the batch dimension
}

var (
	benchSimpleIn  = []benchTensor{{"INPUT0", kserve.Int32, []int64{16}}, {"INPUT1", kserve.Int32, []int64{16}}}
	benchSimpleOut = []benchTensor{{"OUTPUT0", kserve.Int32, []int64{16}}, {"OUTPUT1", kserve.Int32, []int64{16}}}
	benchImageIn   = []benchTensor{{"INPUT__0", kserve.FP32, []int64{3, 224, 224}}}
	benchImageOut  = []benchTensor{{"OUTPUT__0", kserve.FP32, []int64{1000}}}

	benchSimpleJSON   = benchModel{"simple", 8, benchSimpleIn, benchSimpleOut, false}
	benchSimpleBinary = benchModel{"simple", 8, benchSimpleIn, benchSimpleOut, true}
	benchImageBinary  = benchModel{"image", 8, benchImageIn, benchImageOut, true}
)

func (m benchModel) form() string {
	if m.binary {
		return "binary"
	}
	return "json"
}

func (t benchTensor) tensor(rows int64) kserve.Tensor {
	shape := append([]int64{rows}, t.shape...)
	n, _ := kserve.ElementCount(shape)
	data := make([]byte, n*int64(t.dt.Size()))
	for i := range data {
		data[i] = byte(i%7 + 1)
	}
	return kserve.Tensor{Name: t.name, Datatype: t.dt, Shape: shape, Data: data}
}

// requestBody is one caller's wire body, as `ratebatch load` sends it.
func (m benchModel) requestBody(tb testing.TB, id string) (body []byte, headerLen int) {
	tb.Helper()
	r := &kserve.Request{ID: id}
	if m.binary {
		r.Parameters = kserve.Parameters{kserve.ParamBinaryDataOutput: true}
	}
	for _, in := range m.inputs {
		t := in.tensor(1)
		t.Binary = m.binary
		r.Inputs = append(r.Inputs, t)
	}
	body, headerLen, err := kserve.AppendRequest(nil, r, m.binary)
	if err != nil {
		tb.Fatal(err)
	}
	if !m.binary {
		headerLen = -1
	}
	return body, headerLen
}

// replyBody is the upstream's binary answer to a batch of rows.
func (m benchModel) replyBody(tb testing.TB, rows int) (body []byte, headerLen int) {
	tb.Helper()
	resp := &kserve.Response{ModelName: m.name, ModelVersion: "1"}
	for _, out := range m.outputs {
		t := out.tensor(int64(rows))
		t.Binary = true
		resp.Outputs = append(resp.Outputs, t)
	}
	body, headerLen, err := kserve.AppendResponse(nil, resp)
	if err != nil {
		tb.Fatal(err)
	}
	return body, headerLen
}

// newBenchUpstream answers every batch at once with the model's prebuilt
// binary reply for its rows.
func newBenchUpstream(tb testing.TB, m benchModel) *dispatchertest.InstantUpstream {
	return dispatchertest.NewInstantUpstream(m.maxBatch, func(rows int) ([]byte, int) { return m.replyBody(tb, rows) }, nil)
}

// benchPlanner always answers with the work-conserving rule; no observer
// learns from the queue (as the planner before the observer seam, whose
// feedback did nothing).
type benchPlanner struct{}

func (benchPlanner) Rule() policy.Rule        { return policy.Fill{Policy: policy.NameAdhoc} }
func (benchPlanner) Changed() <-chan struct{} { return nil }

func newBenchDispatcher(tb testing.TB, m benchModel, up dispatcher.Upstream, observers ...dispatcher.Observer) *dispatcher.Dispatcher {
	tb.Helper()
	o := dispatcher.Options{Upstream: up, Retries: 1, Metrics: dispatcher.NewMetrics(nil)}
	if len(observers) > 0 {
		o.Observer = dispatcher.Observers(observers)
	}
	d := dispatcher.New(o)
	if err := d.SetModel(dispatcher.ModelSpec{Name: m.name, MaxBatch: m.maxBatch, Instances: 1, QueueRows: 1 << 16, Planner: benchPlanner{}}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Drain(ctx); err != nil {
			tb.Errorf("drain: %v", err)
		}
	})
	return d
}

// benchCaller is one client's decoded request, reused for every op it submits
// (the dispatcher only reads it).
type benchCaller struct {
	req  *kserve.Request
	key  string
	rows int
}

func newBenchCaller(tb testing.TB, m benchModel, i int) (benchCaller, int) {
	tb.Helper()
	body, hl := m.requestBody(tb, "lg-"+strconv.Itoa(i))
	req, err := kserve.DecodeRequest(body, hl)
	if err != nil {
		tb.Fatal(err)
	}
	key, _, ok := kserve.BatchKey(req)
	if !ok {
		tb.Fatal("benchmark request is not batchable")
	}
	return benchCaller{req: req, key: key, rows: 1}, len(body)
}

type benchCase struct {
	m       benchModel
	conc    int
	sources bool // each caller on its own connection (Call.Source)
}

var benchSubmitCases = []benchCase{
	{m: benchSimpleJSON, conc: 1}, {m: benchSimpleJSON, conc: 64},
	{m: benchSimpleBinary, conc: 1}, {m: benchSimpleBinary, conc: 64},
	{m: benchImageBinary, conc: 1}, {m: benchImageBinary, conc: 16},
}

func (c benchCase) String() string {
	return fmt.Sprintf("%s-%s/callers=%d", c.m.name, c.m.form(), c.conc)
}

// BenchmarkSubmit is the dispatcher's work per request against an upstream
// that answers at once.
func BenchmarkSubmit(b *testing.B) {
	for _, bc := range benchSubmitCases {
		b.Run(bc.String(), func(b *testing.B) {
			d := newBenchDispatcher(b, bc.m, newBenchUpstream(b, bc.m))
			benchSubmit(b, d, bc)
		})
	}
}

// BenchmarkSubmitSources is BenchmarkSubmit with every caller on its own
// connection (Call.Source), as the HTTP door tags them: the dispatcher
// counts and learns each source on arrival and answer.
func BenchmarkSubmitSources(b *testing.B) {
	for _, bc := range benchSubmitCases {
		bc.sources = true
		b.Run(bc.String(), func(b *testing.B) {
			d := newBenchDispatcher(b, bc.m, newBenchUpstream(b, bc.m))
			benchSubmit(b, d, bc)
		})
	}
}

// BenchmarkSubmitObserved is BenchmarkSubmitSources with the observers
// serve gives every model: the power meter's alone, and with the
// what-if's recorder of arrivals, answers and batches beside it, whose
// difference is what keeping the arrivals costs a request.
func BenchmarkSubmitObserved(b *testing.B) {
	src, err := power.Open("none", power.Options{})
	if err != nil {
		b.Fatal(err)
	}
	meter, err := power.NewMeter(src, power.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []benchCase{{m: benchSimpleBinary, conc: 1, sources: true}, {m: benchSimpleBinary, conc: 64, sources: true}} {
		// The recorder's rings are made at the model's first call, once:
		// before the benchmark, as in a proxy that has served a while.
		rec := whatif.NewRecorder(whatif.Options{})
		rec.Arrived(dispatcher.Arrival{Model: bc.m.name, At: time.Now(), Rows: 1})
		for _, obs := range []struct {
			name string
			list []dispatcher.Observer
		}{
			{"meter", []dispatcher.Observer{meter.Observer()}},
			{"meter+whatif", []dispatcher.Observer{meter.Observer(), rec}},
		} {
			b.Run(bc.String()+"/"+obs.name, func(b *testing.B) {
				d := newBenchDispatcher(b, bc.m, newBenchUpstream(b, bc.m), obs.list...)
				benchSubmit(b, d, bc)
			})
		}
	}
}

func benchSubmit(b *testing.B, d *dispatcher.Dispatcher, bc benchCase) {
	callers := make([]benchCaller, bc.conc)
	var reqBytes int
	for i := range callers {
		callers[i], reqBytes = newBenchCaller(b, bc.m, i)
	}
	ctx := context.Background()
	dispatchertest.Measure(b, d, reqBytes, bc.conc, func(w int) error {
		c := &callers[w]
		call := &dispatcher.Call{Req: c.req, Rows: c.rows, Key: c.key}
		if bc.sources {
			call.Source = uint64(w + 1)
		}
		res := d.Submit(ctx, bc.m.name, call)
		if res.Err != nil {
			return res.Err
		}
		d.Delivered(res) // as a door does once it has written the answer
		if len(res.Resp.Outputs) != len(bc.m.outputs) {
			res.Release()
			return fmt.Errorf("answer has %d outputs, want %d", len(res.Resp.Outputs), len(bc.m.outputs))
		}
		res.Release()
		return nil
	})
}

// BenchmarkSubmitHTTP is BenchmarkSubmit through the real HTTPUpstream and
// a loopback fasthttp server that answers at once (its cost is included).
func BenchmarkSubmitHTTP(b *testing.B) {
	for _, bc := range []benchCase{{m: benchSimpleBinary, conc: 64}, {m: benchImageBinary, conc: 16}} {
		b.Run(bc.String(), func(b *testing.B) {
			addr := benchReplyServer(b, bc.m)
			up, err := dispatcher.NewHTTPUpstream("http://"+addr, 64, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			d := newBenchDispatcher(b, bc.m, up)
			benchSubmit(b, d, bc)
		})
	}
}

// benchReplyServer serves the model's prebuilt binary replies on loopback.
func benchReplyServer(tb testing.TB, m benchModel) string {
	return kservetest.Server(tb, m.maxBatch, func(rows int) ([]byte, int) { return m.replyBody(tb, rows) }, nil)
}

// TestBenchUpstreams checks the benchmarks' fixtures: both upstreams answer
// a batch with the rows it holds, and every caller gets its own rows back.
func TestBenchUpstreams(t *testing.T) {
	for _, m := range []benchModel{benchSimpleJSON, benchSimpleBinary, benchImageBinary} {
		t.Run(m.name+"-"+m.form(), func(t *testing.T) {
			ups := map[string]dispatcher.Upstream{"instant": newBenchUpstream(t, m)}
			up, err := dispatcher.NewHTTPUpstream("http://"+benchReplyServer(t, m), 4, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ups["http"] = up
			for name, up := range ups {
				var reqs []*kserve.Request
				for i := range 3 {
					c, _ := newBenchCaller(t, m, i)
					reqs = append(reqs, c.req)
				}
				batch, err := kserve.Merge(reqs)
				if err != nil {
					t.Fatal(err)
				}
				reply, err := up.Infer(context.Background(), m.name, "", batch, dispatcher.Outgoing{})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				resp, err := kserve.DecodeResponse(reply.Body, reply.HeaderLen)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				parts, err := batch.Split(resp)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for i, p := range parts {
					if p.ID != reqs[i].ID || len(p.Outputs) != len(m.outputs) || p.Outputs[0].Shape[0] != 1 {
						t.Errorf("%s: caller %d got id %q, %d outputs", name, i, p.ID, len(p.Outputs))
					}
					if p.Outputs[0].Binary != m.binary {
						t.Errorf("%s: caller %d output binary = %v, want %v", name, i, p.Outputs[0].Binary, m.binary)
					}
				}
				reply.Free()
			}
		})
	}
}

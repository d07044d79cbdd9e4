package dispatcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/policy"
)

// fakeUpstream is Triton's `simple` model: OUTPUT0 = INPUT0+INPUT1,
// OUTPUT1 = INPUT0-INPUT1, answered in binary form. A row whose INPUT0[0]
// is badValue makes the whole batch a 400, as a real server would; one
// whose INPUT0[0] is poisoned (poisonValue or below, above badValue) makes
// it a 500 with that value's message, as Triton answers a Python
// backend's TritonError for one request.
type fakeUpstream struct {
	mu       sync.Mutex
	batches  []int      // rows per batch seen
	bodies   [][]byte   // the bodies of those batches
	outs     []Outgoing // what those batches carried besides
	gate     chan struct{}
	connErrs atomic.Int32 // fail this many calls with a connection error
	status   atomic.Int32 // answer every call with this status when non-zero
	timeout  atomic.Bool
	refuse   atomic.Bool            // refuse connections: the upstream is down
	calls    atomic.Int32           // Infer calls so far
	refused  atomic.Int32           // calls refused while down
	running  atomic.Int32           // calls in progress
	peak     atomic.Int32           // most calls in progress at once
	slow     atomic.Int64           // nanoseconds every call takes
	errMsg   atomic.Pointer[string] // the error text of a status answer (default "model exploded")
}

const (
	badValue    = -999
	poisonValue = -500
)

// poisonMsg is the 500's message for a poisoned row.
func poisonMsg(v int32) string { return fmt.Sprintf("poisoned request: INPUT0 holds %d", v) }

func (u *fakeUpstream) Infer(_ context.Context, model, version string, batch Body, o Outgoing) (*Reply, error) {
	u.calls.Add(1)
	n := u.running.Add(1)
	defer u.running.Add(-1)
	for p := u.peak.Load(); n > p && !u.peak.CompareAndSwap(p, n); p = u.peak.Load() {
	}
	if u.refuse.Load() {
		time.Sleep(time.Millisecond) // a refused dial is not instant: concurrent ones overlap
		u.refused.Add(1)
		return nil, &ConnError{Err: errors.New("dial tcp: connect: connection refused"), Dial: true}
	}
	if u.gate != nil {
		<-u.gate
	}
	time.Sleep(time.Duration(u.slow.Load()))
	if u.connErrs.Add(-1) >= 0 {
		return nil, &ConnError{Err: errors.New("connection reset by peer")}
	}
	if u.timeout.Load() {
		return nil, ErrUpstreamTimeout
	}
	if s := u.status.Load(); s != 0 {
		msg := "model exploded"
		if m := u.errMsg.Load(); m != nil {
			msg = *m
		}
		return &Reply{Status: int(s), Body: kserve.AppendErrorBody(nil, msg), HeaderLen: -1, Free: func() {}}, nil
	}
	body, err := io.ReadAll(batch.Reader())
	if err != nil || len(body) != batch.BodyLen() {
		return nil, fmt.Errorf("fake upstream: read %d of %d body bytes: %v", len(body), batch.BodyLen(), err)
	}
	req, err := kserve.DecodeRequest(body, batch.HeaderLen())
	if err != nil {
		return nil, fmt.Errorf("fake upstream: %w", err)
	}
	a, _ := req.Inputs[0].Int32s()
	rows := req.Inputs[0].Shape[0]
	u.mu.Lock()
	u.batches = append(u.batches, int(rows))
	u.bodies = append(u.bodies, body)
	u.outs = append(u.outs, o)
	u.mu.Unlock()
	for _, v := range a {
		switch {
		case v == badValue:
			return &Reply{Status: 400, Body: kserve.AppendErrorBody(nil, "bad input"), HeaderLen: -1, Free: func() {}}, nil
		case v <= poisonValue && v > badValue:
			return &Reply{Status: 500, Body: kserve.AppendErrorBody(nil, poisonMsg(v)), HeaderLen: -1, ContentType: "text/plain", Free: func() {}}, nil
		}
	}
	out, hl, err := kserve.AppendResponse(nil, simpleResponse(model, req))
	if err != nil {
		return nil, err
	}
	return &Reply{Status: 200, Body: out, HeaderLen: hl, Free: func() {}}, nil
}

// simpleResponse is Triton's simple model's answer to req, in binary
// form: OUTPUT0 = INPUT0+INPUT1, OUTPUT1 = INPUT0-INPUT1.
func simpleResponse(model string, req *kserve.Request) *kserve.Response {
	a, _ := req.Inputs[0].Int32s()
	b, _ := req.Inputs[1].Int32s()
	sum, diff := make([]int32, len(a)), make([]int32, len(a))
	for i := range a {
		sum[i], diff[i] = a[i]+b[i], a[i]-b[i]
	}
	o0, _ := kserve.NewTensor("OUTPUT0", req.Inputs[0].Shape, sum)
	o1, _ := kserve.NewTensor("OUTPUT1", req.Inputs[0].Shape, diff)
	o0.Binary, o1.Binary = true, true
	return &kserve.Response{ModelName: model, ID: req.ID, Outputs: []kserve.Tensor{o0, o1}}
}

func (u *fakeUpstream) seen() []int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]int(nil), u.batches...)
}

func (u *fakeUpstream) seenBodies() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]byte(nil), u.bodies...)
}

// fixedPlanner always answers with one rule, and counts what it observes.
type fixedPlanner struct {
	NopObserver
	rule     policy.Rule
	changed  chan struct{}
	arrived  atomic.Int64
	observed atomic.Int64 // batches the upstream answered
	// Decisions reported, and those open to a partner.
	decisions, open atomic.Int64
	// onObserve, when set, runs as each batch the upstream answered ends.
	onObserve func()
}

func newPlanner(r policy.Rule) *fixedPlanner {
	return &fixedPlanner{rule: r, changed: make(chan struct{})}
}
func (p *fixedPlanner) Rule() policy.Rule        { return p.rule }
func (p *fixedPlanner) Changed() <-chan struct{} { return p.changed }
func (p *fixedPlanner) Arrived(a Arrival)        { p.arrived.Add(int64(a.Rows)) }
func (p *fixedPlanner) Decided(d Decision) {
	p.decisions.Add(1)
	if d.PartnerPossible() {
		p.open.Add(1)
	}
}
func (p *fixedPlanner) BatchEnded(_ *Batch, e BatchEnd) {
	if !e.OK {
		return
	}
	p.observed.Add(1)
	if p.onObserve != nil {
		p.onObserve()
	}
}

type harness struct {
	d   *Dispatcher
	up  *fakeUpstream
	pl  *fixedPlanner
	m   *Metrics
	reg *prometheus.Registry
}

// newHarness starts a dispatcher with one model; setup, if any, changes
// the dispatcher before its queue's goroutine starts (options, the clock),
// which a test must not do after.
func newHarness(t *testing.T, rule policy.Rule, spec ModelSpec, up *fakeUpstream, setup ...func(*Dispatcher)) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	pl := newPlanner(rule)
	spec.Name, spec.Planner, spec.Observer = "simple", pl, pl
	if spec.MaxBatch == 0 {
		spec.MaxBatch = 8
	}
	if spec.QueueRows == 0 {
		spec.QueueRows = 1024
	}
	d := startModel(t, Options{Upstream: up, Retries: 1, Metrics: m}, spec, setup...)
	return &harness{d: d, up: up, pl: pl, m: m, reg: reg}
}

// startModel starts a dispatcher with one model, drained at the test's
// end; setup, if any, changes the dispatcher before the model's queue
// starts.
func startModel(t *testing.T, o Options, spec ModelSpec, setup ...func(*Dispatcher)) *Dispatcher {
	t.Helper()
	d := New(o)
	for _, f := range setup {
		f(d)
	}
	if err := d.SetModel(spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.Drain(ctx); err != nil {
			t.Errorf("drain: %v", err)
		}
	})
	return d
}

// call builds a request of rows rows whose INPUT0 row r is base+r.
func call(t *testing.T, base int32, rows int) *Call {
	t.Helper()
	a, b := make([]int32, rows*16), make([]int32, rows*16)
	for i := range a {
		a[i] = base + int32(i/16)
		b[i] = int32(i % 16)
	}
	shape := []int64{int64(rows), 16}
	in0, _ := kserve.NewTensor("INPUT0", shape, a)
	in1, _ := kserve.NewTensor("INPUT1", shape, b)
	req := &kserve.Request{ID: fmt.Sprint(base), Inputs: []kserve.Tensor{in0, in1}}
	key, n, ok := kserve.BatchKey(req)
	if !ok || n != int64(rows) {
		t.Fatalf("request not batchable (%v) or %d rows, want %d", ok, n, rows)
	}
	return &Call{Req: req, Rows: rows, Key: key}
}

// wired gives c the wire body it would have had over HTTP, in binary or
// JSON form.
func wired(t *testing.T, c *Call, binary bool) *Call {
	t.Helper()
	body, hl, err := kserve.AppendRequest(nil, c.Req, binary)
	if err != nil {
		t.Fatal(err)
	}
	c.Wire = Wire{Body: body, HeaderLen: hl}
	return c
}

// checkAnswer verifies r answers c: OUTPUT0 = INPUT0+INPUT1 of c's own rows.
// A call that went alone with its Wire set must have the upstream's answer
// as it came; any other a decoded response.
func checkAnswer(c *Call, r Result) error {
	if r.Err != nil {
		return r.Err
	}
	defer r.Release()
	resp := r.Resp
	if r.Wire != nil {
		if c.Wire.Body == nil || r.Resp != nil {
			return fmt.Errorf("answered as it came (Resp %v) to a call without a wire body", r.Resp)
		}
		var err error
		if resp, err = kserve.DecodeResponse(r.Wire.Body, r.Wire.HeaderLen); err != nil {
			return fmt.Errorf("answer as it came: %w", err)
		}
	} else if c.Wire.Body != nil && r.BatchRows == c.Rows {
		return errors.New("a lone call with a wire body was answered from a split")
	}
	if resp.ID != c.Req.ID {
		return fmt.Errorf("id %q, want %q", resp.ID, c.Req.ID)
	}
	a, _ := c.Req.Inputs[0].Int32s()
	b, _ := c.Req.Inputs[1].Int32s()
	var sum []int32
	for _, o := range resp.Outputs {
		if o.Name == "OUTPUT0" {
			sum, _ = o.Int32s()
		}
	}
	if len(sum) != len(a) {
		return fmt.Errorf("OUTPUT0 has %d elements, want %d", len(sum), len(a))
	}
	for i := range a {
		if sum[i] != a[i]+b[i] {
			return fmt.Errorf("OUTPUT0[%d] = %d, want %d: another caller's answer", i, sum[i], a[i]+b[i])
		}
	}
	return nil
}

func status(err error) int {
	var ke *kserve.Error
	if errors.As(err, &ke) {
		return ke.Status
	}
	return 0
}

func TestEachCallerGetsItsOwnAnswerInBatches(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 4, MaxWait: 20 * time.Millisecond}, ModelSpec{}, up)
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := call(t, int32(i*100), 1+i%2)
			if err := checkAnswer(c, h.d.Submit(context.Background(), "simple", c)); err != nil {
				errs <- fmt.Errorf("caller %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	batches := up.seen()
	rows, biggest := 0, 0
	for _, b := range batches {
		rows += b
		biggest = max(biggest, b)
	}
	if want := 64 + 32; rows != want {
		t.Fatalf("upstream saw %d rows, want %d", rows, want)
	}
	if biggest < 2 {
		t.Fatalf("no batch larger than 1 formed: %v", batches)
	}
	if got := int(h.pl.arrived.Load()); got != 96 {
		t.Fatalf("planner counted %d arrivals, want 96", got)
	}
	if h.pl.observed.Load() != int64(len(batches)) {
		t.Fatalf("planner observed %d batches, upstream saw %d", h.pl.observed.Load(), len(batches))
	}
	assertAccounting(t, h.m, 64)
}

// A call alone in its batch with a wire body goes upstream as it came and
// gets the upstream's answer as it came; calls batched together are merged
// and split, wire bodies or not.
func TestLoneCallGoesAsItCame(t *testing.T) {
	for _, binary := range []bool{true, false} {
		t.Run(fmt.Sprintf("alone/binary=%v", binary), func(t *testing.T) {
			up := &fakeUpstream{}
			h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{}, up)
			c := wired(t, call(t, 7, 2), binary)
			r := h.d.Submit(context.Background(), "simple", c)
			if r.Err == nil && r.Wire == nil {
				t.Fatal("a lone call with a wire body was answered from a split")
			}
			if err := checkAnswer(c, r); err != nil {
				t.Fatal(err)
			}
			if got := up.seenBodies(); len(got) != 1 || !bytes.Equal(got[0], c.Wire.Body) {
				t.Fatalf("upstream got %d bodies, want the caller's own once", len(got))
			}
			if h.pl.observed.Load() != 1 || h.pl.arrived.Load() != 2 {
				t.Fatalf("planner: %d batches observed, %d rows arrived; want 1 and 2", h.pl.observed.Load(), h.pl.arrived.Load())
			}
			assertAccounting(t, h.m, 1)
		})
	}
	t.Run("batched", func(t *testing.T) {
		up := &fakeUpstream{}
		h := newHarness(t, policy.Fill{Policy: "test", Batch: 2, MaxWait: time.Hour}, ModelSpec{}, up)
		calls := []*Call{wired(t, call(t, 10, 1), true), wired(t, call(t, 20, 1), false)}
		results := make([]Result, len(calls))
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Go(func() { results[i] = h.d.Submit(context.Background(), "simple", c) })
		}
		wg.Wait()
		for i, c := range calls {
			if results[i].Err == nil && results[i].Resp == nil {
				t.Fatalf("caller %d of a batch of two was not answered from the split", i)
			}
			if err := checkAnswer(c, results[i]); err != nil {
				t.Fatalf("caller %d: %v", i, err)
			}
		}
		if got := up.seen(); len(got) != 1 || got[0] != 2 {
			t.Fatalf("upstream saw batches %v, want one of 2 rows", got)
		}
	})
}

// A key queue emptied by its batch is reused for the next new key: calls
// of two keys taking turns each get their own answer, and the queue lists
// only the key in use.
func TestKeyQueueReusedAcrossKeys(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{}, up)
	for i := range 6 {
		c := call(t, int32(100*i), 1)
		if i%2 == 1 { // 8 columns instead of 16: another batch key
			for j := range c.Req.Inputs {
				in := &c.Req.Inputs[j]
				in.Shape, in.Data = []int64{1, 8}, in.Data[:8*4]
			}
			c.Key, _, _ = kserve.BatchKey(c.Req)
		}
		if err := checkAnswer(c, h.d.Submit(context.Background(), "simple", c)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if s := firstSnapshot(h.d); s.Keys > 1 || s.QueuedRows != 0 {
			t.Fatalf("after call %d: %d keys, %d rows queued", i, s.Keys, s.QueuedRows)
		}
	}
	assertAccounting(t, h.m, 6)
}

func firstSnapshot(d *Dispatcher) Snapshot {
	for _, s := range d.Snapshots() {
		return s
	}
	return Snapshot{}
}

func assertAccounting(t *testing.T, m *Metrics, want int) {
	t.Helper()
	acc := testutil.ToFloat64(m.Accepted.WithLabelValues("simple"))
	ans := testutil.ToFloat64(m.Answered.WithLabelValues("simple", "ok")) + testutil.ToFloat64(m.Answered.WithLabelValues("simple", "error"))
	if acc != float64(want) || ans != acc {
		t.Fatalf("accepted %v, answered %v, want both %d", acc, ans, want)
	}
}

func TestUpstreamFailures(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(u *fakeUpstream)
		retries    int
		wantStatus int
	}{
		{"connection error retried once", func(u *fakeUpstream) { u.connErrs.Store(1) }, 1, 0},
		{"connection error without retry", func(u *fakeUpstream) { u.connErrs.Store(1) }, 0, http.StatusBadGateway},
		{"connection errors past retries", func(u *fakeUpstream) { u.connErrs.Store(5) }, 1, http.StatusBadGateway},
		{"timeout", func(u *fakeUpstream) { u.timeout.Store(true) }, 1, http.StatusGatewayTimeout},
		{"server error", func(u *fakeUpstream) { u.status.Store(500) }, 1, http.StatusInternalServerError},
	}
	for _, tt := range tests {
		for _, wire := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/wire=%v", tt.name, wire), func(t *testing.T) {
				up := &fakeUpstream{}
				tt.setup(up)
				h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{}, up, func(d *Dispatcher) { d.o.Retries = tt.retries })
				c := call(t, 1, 1)
				if wire {
					wired(t, c, true)
				}
				r := h.d.Submit(context.Background(), "simple", c)
				if tt.wantStatus == 0 {
					if err := checkAnswer(c, r); err != nil {
						t.Fatal(err)
					}
					return
				}
				if got := status(r.Err); got != tt.wantStatus {
					t.Fatalf("status %d (%v), want %d", got, r.Err, tt.wantStatus)
				}
				if tt.wantStatus == 500 && r.Err.Error() != "model exploded" {
					t.Fatalf("upstream's message lost: %q", r.Err)
				}
			})
		}
	}
}

func TestBadMemberFailsAlone(t *testing.T) {
	up := &fakeUpstream{gate: make(chan struct{})}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 3, MaxWait: time.Hour}, ModelSpec{}, up)
	// With wire bodies, as over HTTP: each resend goes as its caller sent it.
	calls := []*Call{wired(t, call(t, 10, 1), true), wired(t, call(t, badValue, 1), false), wired(t, call(t, 30, 1), true)}
	results := make([]Result, 3)
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = h.d.Submit(context.Background(), "simple", c) }()
	}
	close(up.gate)
	wg.Wait()
	if status(results[1].Err) != 400 {
		t.Fatalf("bad member: %v, want 400", results[1].Err)
	}
	for _, i := range []int{0, 2} {
		if err := checkAnswer(calls[i], results[i]); err != nil {
			t.Fatalf("good member %d failed with the bad one: %v", i, err)
		}
	}
	// The bad member ends alone, sent as it came: its 400 is Triton's
	// answer to its own request.
	if !slices.ContainsFunc(up.seenBodies(), func(b []byte) bool { return bytes.Equal(b, calls[1].Wire.Body) }) {
		t.Fatal("the bad member was not resent alone as it came")
	}
	assertAccounting(t, h.m, 3)
}

// The resends of a refused batch's parts stay within the model's instance
// limit.
func TestBadMemberResendsBounded(t *testing.T) {
	up := &fakeUpstream{gate: make(chan struct{})}
	up.slow.Store(int64(5 * time.Millisecond))
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 8, MaxWait: time.Hour}, ModelSpec{Instances: 2}, up)
	calls := make([]*Call, 8)
	results := make([]Result, 8)
	var wg sync.WaitGroup
	for i := range calls {
		calls[i] = call(t, int32(10*i+10), 1)
		if i == 3 {
			calls[i] = call(t, badValue, 1)
		}
		wg.Go(func() { results[i] = h.d.Submit(context.Background(), "simple", calls[i]) })
	}
	testpoll.Until(t, `up.calls.Load() == 1`, func() bool { return up.calls.Load() == 1 }) // the full batch is at the gate
	close(up.gate)
	wg.Wait()
	for i, c := range calls {
		if i == 3 {
			if status(results[i].Err) != 400 {
				t.Fatalf("bad member: %v, want 400", results[i].Err)
			}
			continue
		}
		if err := checkAnswer(c, results[i]); err != nil {
			t.Fatalf("good member %d: %v", i, err)
		}
	}
	if p := up.peak.Load(); p > 2 {
		t.Fatalf("%d calls at once reached the upstream, want at most the 2 instances", p)
	}
	if got := up.calls.Load(); got != 7 {
		t.Fatalf("%d upstream calls, want the batch and its bisection's 6 (halves of 4, 2 and 1)", got)
	}
	assertAccounting(t, h.m, 8)
}

func TestAdmission(t *testing.T) {
	up := &fakeUpstream{gate: make(chan struct{})}
	defer close(up.gate)
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 8, MaxWait: time.Hour}, ModelSpec{MaxBatch: 4, QueueRows: 4}, up)

	if r := h.d.Submit(context.Background(), "simple", call(t, 1, 5)); status(r.Err) != 400 {
		t.Fatalf("rows over max batch: %v, want 400", r.Err)
	}
	h.occupy(t, call(t, 1, 4)) // a full batch, held at the upstream
	ctx, cancel := context.WithCancel(context.Background())
	go h.d.Submit(ctx, "simple", call(t, 2, 4)) // fills the queue while the instance is busy
	testpoll.Until(t, `h.d.Snapshots()[0].QueuedRows == 4`, func() bool { return h.d.Snapshots()[0].QueuedRows == 4 })
	r := h.d.Submit(context.Background(), "simple", call(t, 2, 1))
	if status(r.Err) != 503 {
		t.Fatalf("over the queue bound: %v, want 503", r.Err)
	}
	cancel() // the client goes away while queued
	testpoll.Until(t, `h.d.Snapshots()[0].QueuedRows == 0`, func() bool { return h.d.Snapshots()[0].QueuedRows == 0 })
	if r := h.d.Submit(context.Background(), "nope", call(t, 1, 1)); !errors.Is(r.Err, ErrUnknownModel) {
		t.Fatalf("unknown model: %v", r.Err)
	}
	up.gate <- struct{}{} // the held batch completes
	testpoll.Until(t, `len(up.seen()) == 1 && h.d.Snapshots()[0].InFlight == 0`, func() bool { return len(up.seen()) == 1 && h.d.Snapshots()[0].InFlight == 0 })
	if got := up.seen(); got[0] != 4 {
		t.Fatalf("upstream saw batches %v, want only the first 4-row batch", got)
	}
}

// overridable is a queue policy under which a call's own timeout, up to
// an hour, is its timeout in the queue, and the model has two priority
// levels.
var overridable = QueuePolicy{Levels: 2, DefaultLevel: 2, Default: Timeouts{Default: time.Hour, AllowOverride: true}}

func TestExpireAndPriority(t *testing.T) {
	up := &fakeUpstream{gate: make(chan struct{})}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{Queue: overridable}, up)
	// The first call occupies the only instance until the gate opens.
	first := call(t, 1, 1)
	firstDone := h.occupy(t, first)

	exp := call(t, 2, 1)
	exp.Timeout = 20 * time.Millisecond
	if r := h.d.Submit(context.Background(), "simple", exp); status(r.Err) != 503 || r.Err.Error() != "Request timeout expired" {
		t.Fatalf("expired call: %v, want 503 Request timeout expired", r.Err)
	}

	order := make(chan string, 2)
	low, high := call(t, 3, 1), call(t, 4, 1)
	high.Priority = 1
	var wg sync.WaitGroup
	for _, c := range []*Call{low, high} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := h.d.Submit(context.Background(), "simple", c)
			if err := checkAnswer(c, r); err != nil {
				t.Error(err)
			}
			order <- c.Req.ID
		}()
		testpoll.Until(t, `h.d.Snapshots()[0].QueuedRows >= int(c.Req.Inputs[0].Shape[0])`, func() bool { return h.d.Snapshots()[0].QueuedRows >= int(c.Req.Inputs[0].Shape[0]) })
	}
	testpoll.Until(t, `h.d.Snapshots()[0].QueuedRows == 2`, func() bool { return h.d.Snapshots()[0].QueuedRows == 2 })
	// Release the gate one batch at a time.
	up.gate <- struct{}{}
	<-firstDone
	up.gate <- struct{}{}
	if got := <-order; got != high.Req.ID {
		t.Fatalf("first served %s, want the priority-1 call %s", got, high.Req.ID)
	}
	up.gate <- struct{}{}
	wg.Wait()
}

func TestDrainSendsPartialBatches(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 8, MaxWait: time.Hour}, ModelSpec{}, up)
	c := call(t, 5, 1)
	done := make(chan Result, 1)
	go func() { done <- h.d.Submit(context.Background(), "simple", c) }()
	testpoll.Until(t, `h.d.Snapshots()[0].QueuedRows == 1`, func() bool { return h.d.Snapshots()[0].QueuedRows == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.d.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := checkAnswer(c, <-done); err != nil {
		t.Fatalf("queued call not served on drain: %v", err)
	}
	if r := h.d.Submit(context.Background(), "simple", call(t, 6, 1)); status(r.Err) != 503 {
		t.Fatalf("call after drain: %v, want 503", r.Err)
	}
}

// Drain past its deadline answers what is still queued with 503 rather than
// leaving it waiting for an instance that a hung batch holds.
// occupy submits c in the background and returns once its batch is in
// flight: behind a gated upstream, it holds the model's only instance until
// the gate opens. The channel gets c's answer.
func (h *harness) occupy(t *testing.T, c *Call) <-chan Result {
	t.Helper()
	done := make(chan Result, 1)
	go func() { done <- h.d.Submit(context.Background(), "simple", c) }()
	testpoll.Until(t, `h.d.Snapshots()[0].InFlight == 1`, func() bool { return h.d.Snapshots()[0].InFlight == 1 })
	return done
}

func TestDrainTimeoutFailsQueued(t *testing.T) {
	up := &fakeUpstream{gate: make(chan struct{})}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{Instances: 1}, up)
	first, queued := call(t, 1, 1), call(t, 2, 1)
	firstDone := h.occupy(t, first)
	queuedDone := make(chan Result, 1)
	go func() { queuedDone <- h.d.Submit(context.Background(), "simple", queued) }()
	testpoll.Until(t, `h.d.Snapshots()[0].QueuedRows == 1`, func() bool { return h.d.Snapshots()[0].QueuedRows == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.d.Drain(ctx); err == nil {
		t.Fatal("drain returned nil with a batch stuck upstream")
	}
	r := <-queuedDone
	if status(r.Err) != http.StatusServiceUnavailable || r.Err.Error() != "proxy shut down before the request was sent" {
		t.Fatalf("queued call on drain timeout: %v, want 503 'proxy shut down before the request was sent'", r.Err)
	}
	if s := h.d.Snapshots()[0]; s.QueuedRows != 0 {
		t.Fatalf("%d rows still queued after the drain timeout", s.QueuedRows)
	}
	close(up.gate) // the stuck batch completes and is still answered
	if err := checkAnswer(first, <-firstDone); err != nil {
		t.Fatalf("the batch in flight: %v", err)
	}
	assertAccounting(t, h.m, 2)
}

// A batch formed on another goroutine goes to its first caller to run. When
// that caller hangs up just as the batch reaches it, it must still run the
// batch: its partner would otherwise wait for ever. The hang-up comes as the
// batch before them ends, so the next batch often takes the leaver before
// it can withdraw; either way both get an answer.
func TestHandedBatchRunsWhenItsCallerLeaves(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 2, MaxWait: 2 * time.Millisecond}, ModelSpec{Instances: 1}, up)
	taken := 0
	for i := range 100 {
		up.gate = make(chan struct{})
		first, leaver, partner := call(t, 1, 2), call(t, 2, 1), call(t, 3, 1)
		ctx, cancel := context.WithCancel(context.Background())
		var once sync.Once
		h.pl.onObserve = func() { once.Do(cancel) }
		firstDone := h.occupy(t, first)
		leaverDone, partnerDone := make(chan Result, 1), make(chan Result, 1)
		go func() { leaverDone <- h.d.Submit(ctx, "simple", leaver) }()
		testpoll.Until(t, `h.d.Snapshots()[0].QueuedRows == 1`, func() bool { return h.d.Snapshots()[0].QueuedRows == 1 })
		go func() { partnerDone <- h.d.Submit(context.Background(), "simple", partner) }()
		testpoll.Until(t, `h.d.Snapshots()[0].QueuedRows == 2`, func() bool { return h.d.Snapshots()[0].QueuedRows == 2 })
		close(up.gate)
		for _, w := range []struct {
			c    *Call
			done <-chan Result
		}{{first, firstDone}, {partner, partnerDone}} {
			select {
			case r := <-w.done:
				if err := checkAnswer(w.c, r); err != nil {
					t.Fatalf("round %d: %v", i, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: a caller of the handed batch got no answer", i)
			}
		}
		r := <-leaverDone
		switch {
		case r.Err == nil:
			taken++
			if err := checkAnswer(leaver, r); err != nil {
				t.Fatalf("round %d: the leaver: %v", i, err)
			}
		case !errors.Is(r.Err, context.Canceled):
			t.Fatalf("round %d: the leaver: %v, want its answer or context.Canceled", i, r.Err)
		}
		cancel()
		h.pl.onObserve = nil
	}
	t.Logf("the leaver was in a batch before it could withdraw in %d of 100 rounds", taken)
	assertAccounting(t, h.m, 300)
}

// deferredCall is call's request as the HTTP door hands it over: decoded
// from its JSON wire body with the data left as text. mangle, when set,
// rewrites the body first.
func deferredCall(t *testing.T, base int32, rows int, mangle func([]byte) []byte) *Call {
	t.Helper()
	c := wired(t, call(t, base, rows), false)
	if mangle != nil {
		c.Wire.Body = mangle(c.Wire.Body)
	}
	req, err := kserve.DecodeRequestDeferred(c.Wire.Body, c.Wire.HeaderLen)
	if err != nil {
		t.Fatal(err)
	}
	if !req.Inputs[0].Deferred() {
		t.Fatal("the JSON data was decoded at once")
	}
	c.Req = req
	return c
}

// oneElementMore makes the first input's data one element longer than its
// shape: a body whose extent is sound and whose values are not.
func oneElementMore(body []byte) []byte {
	return bytes.Replace(body, []byte(`"data":[`), []byte(`"data":[0,`), 1)
}

// Data the HTTP door deferred is decoded for the batches that merge it,
// and a caller whose data is bad fails alone with 400: while it waits, it
// leaves the queue; when its arrival completes a batch, that batch goes
// without it.
func TestDeferredData(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bad     []bool // which callers' data is bad, in order of arrival
		batches []int  // rows of the batches the upstream sees
	}{
		{"merged", []bool{false, false, false}, []int{3}},
		{"bad one completes the batch", []bool{false, false, true}, []int{2}},
		{"bad one completes a batch of two", []bool{false, true}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := &fakeUpstream{}
			h := newHarness(t, policy.Fill{Policy: "test", Batch: len(tc.bad), MaxWait: time.Hour}, ModelSpec{}, up)
			calls := make([]*Call, len(tc.bad))
			for i, bad := range tc.bad {
				var mangle func([]byte) []byte
				if bad {
					mangle = oneElementMore
				}
				calls[i] = deferredCall(t, int32(10*(i+1)), 1, mangle)
			}
			// Each arrives once the one before is queued, so the last one's
			// arrival forms the batch and its goroutine runs it.
			results := make([]Result, len(calls))
			var wg sync.WaitGroup
			for i, c := range calls {
				wg.Go(func() { results[i] = h.d.Submit(context.Background(), "simple", c) })
				for i < len(calls)-1 && firstSnapshot(h.d).QueuedRows != i+1 {
					time.Sleep(time.Millisecond)
				}
			}
			wg.Wait()
			for i, r := range results {
				var kerr *kserve.Error
				switch {
				case tc.bad[i] && (!errors.As(r.Err, &kerr) || kerr.Status != http.StatusBadRequest || !strings.Contains(kerr.Msg, "needs 16 elements, data has 17")):
					t.Errorf("caller %d with bad data: %v, want a 400 naming the count", i, r.Err)
				case !tc.bad[i]:
					if err := checkAnswer(calls[i], r); err != nil {
						t.Errorf("caller %d: %v", i, err)
					}
				}
			}
			if got := up.seen(); !slices.Equal(got, tc.batches) {
				t.Fatalf("upstream saw batches %v, want %v", got, tc.batches)
			}
			if n := h.pl.observed.Load(); n != 0 && slices.Contains(tc.bad, true) {
				t.Fatalf("a batch that lost a caller taught the planner (%d observations)", n)
			}
			assertAccounting(t, h.m, len(tc.bad))
		})
	}
	t.Run("waiting", func(t *testing.T) {
		up := &fakeUpstream{}
		h := newHarness(t, policy.Fill{Policy: "test", Batch: 2, MaxWait: time.Hour}, ModelSpec{}, up)
		bad := deferredCall(t, 5, 1, oneElementMore)
		if r := h.d.Submit(context.Background(), "simple", bad); r.Err == nil || !strings.Contains(r.Err.Error(), "data has 17") {
			t.Fatalf("a waiting caller with bad data: %v, want its 400", r.Err)
		}
		if s := firstSnapshot(h.d); s.QueuedRows != 0 {
			t.Fatalf("%d rows still queued", s.QueuedRows)
		}
		results := make([]Result, 2)
		var wg sync.WaitGroup
		for i := range results {
			c := deferredCall(t, int32(10*(i+1)), 1, nil)
			wg.Go(func() { results[i] = h.d.Submit(context.Background(), "simple", c) })
		}
		wg.Wait()
		for i, r := range results {
			if r.Err != nil || r.BatchRows != 2 {
				t.Fatalf("caller %d: %v in a batch of %d, want an answer in a batch of 2", i, r.Err, r.BatchRows)
			}
			r.Release()
		}
		assertAccounting(t, h.m, 3)
	})
}

// A lone call goes as it came only when Triton reads and answers it as it
// came: not when it carries FP16 or BF16 values as JSON or asks for an
// output of those types in JSON (ModelSpec.HalfOutputs); those are merged,
// so that the proxy converts them.
func TestHalfInJSONIsMerged(t *testing.T) {
	for _, tc := range []struct {
		name      string
		binaryOut bool // the call asks for binary outputs
		wire      bool // want the answer as it came
	}{
		{"JSON outputs", false, false},
		{"binary outputs", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := &fakeUpstream{}
			h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{HalfOutputs: []string{"OUTPUT0"}}, up)
			c := call(t, 7, 1)
			if tc.binaryOut {
				c.Req.Parameters = kserve.Parameters{kserve.ParamBinaryDataOutput: true}
			}
			c = wired(t, c, false)
			r := h.d.Submit(context.Background(), "simple", c)
			if r.Err != nil || (r.Wire != nil) != tc.wire {
				t.Fatalf("answered as it came: %v (err %v), want %v", r.Wire != nil, r.Err, tc.wire)
			}
			r.Release()
		})
	}
}

// TestRelease: a call answered from a batch, or refused before it queued,
// is reset for NewCall to reuse; one that left its queue without a batch
// (expired, or its caller gone) is not, because its key queue still holds
// it until a decision pass drops it, and a reused call there would be
// taken a second time.
func TestRelease(t *testing.T) {
	up := &fakeUpstream{gate: make(chan struct{})}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{MaxBatch: 2, Queue: overridable}, up)
	reset := func(c *Call) bool { return c.Req == nil && c.Key == "" && c.Rows == 0 }

	// The first call holds the only instance until the gate opens.
	first := call(t, 1, 1)
	firstDone := h.occupy(t, first)

	expired := call(t, 2, 1)
	expired.Timeout = 10 * time.Millisecond
	if r := h.d.Submit(context.Background(), "simple", expired); status(r.Err) != 503 {
		t.Fatalf("expiring call: %v, want 503", r.Err)
	}
	gone := call(t, 3, 1)
	ctx, cancel := context.WithCancel(context.Background())
	goneDone := make(chan Result, 1)
	go func() { goneDone <- h.d.Submit(ctx, "simple", gone) }()
	testpoll.Until(t, `h.d.Snapshots()[0].QueuedRows == 1`, func() bool { return h.d.Snapshots()[0].QueuedRows == 1 })
	cancel()
	if r := <-goneDone; !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("call whose caller left: %v, want context.Canceled", r.Err)
	}
	tooBig := call(t, 4, 3)
	if r := h.d.Submit(context.Background(), "simple", tooBig); status(r.Err) != 400 {
		t.Fatalf("call of 3 rows with max_batch_size 2: %v, want 400", r.Err)
	}

	up.gate <- struct{}{}
	if err := checkAnswer(first, <-firstDone); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		c     *Call
		reuse bool
	}{
		{"answered from a batch", first, true},
		{"refused before it queued", tooBig, true},
		{"expired in the queue", expired, false},
		{"withdrawn by its caller", gone, false},
	} {
		tc.c.Release()
		if got := reset(tc.c); got != tc.reuse {
			t.Errorf("%s: reset for reuse %v, want %v", tc.name, got, tc.reuse)
		}
	}

	// Calls released and reused through NewCall, many at once, with some
	// callers leaving: each still gets its own answer (run with -race).
	close(up.gate)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				base := int32(1000*g + 10*i)
				proto := call(t, base, 1)
				c, ok, err := NewCall(proto.Req, "", time.Now())
				if !ok || err != nil {
					t.Errorf("NewCall: %v, %v", ok, err)
					return
				}
				ctx, cancel := context.WithCancel(context.Background())
				if i%5 == 0 {
					cancel()
				}
				r := h.d.Submit(ctx, "simple", c)
				cancel()
				if r.Err == nil {
					if err := checkAnswer(c, r); err != nil {
						t.Errorf("caller %d: %v", base, err)
					}
				} else if !errors.Is(r.Err, context.Canceled) {
					t.Errorf("caller %d: %v", base, r.Err)
				}
				c.Release()
			}
		})
	}
	wg.Wait()
}

// Models found while the proxy shuts down (discovery still running) are
// refused: a queue added during Drain would start its loop while Drain
// waits for the loops, which the race detector reports (CI found it).
func TestSetModelDuringDrain(t *testing.T) {
	d := New(Options{Upstream: &fakeUpstream{}, Retries: 1})
	spec := func(name string) ModelSpec {
		return ModelSpec{Name: name, MaxBatch: 8, QueueRows: 64, Planner: newPlanner(policy.Fill{Policy: "test", Batch: 1})}
	}
	if err := d.SetModel(spec("first")); err != nil {
		t.Fatal(err)
	}
	added := make(chan error, 1)
	go func() {
		var err error
		for i := 0; err == nil; i++ {
			err = d.SetModel(spec(fmt.Sprintf("m%d", i)))
		}
		added <- err
	}()
	if err := d.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-added; !errors.Is(err, ErrClosed) {
		t.Fatalf("SetModel during Drain: %v, want ErrClosed", err)
	}
	if err := d.SetModel(spec("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetModel after Drain: %v, want ErrClosed", err)
	}
}

// Package loadgen offers open-loop load to a KServe v2 inference server and
// records what happened to every request.
//
// Arrivals follow a Poisson process whose rate is a constant or any series
// (a trace); they are drawn from a seed before and independently of any
// answer, so a slow server cannot slow the load down. A bounded pool of
// workers sends the requests; when every worker is busy, an arrival is
// either dropped and counted (DropWhenFull) or delayed until one frees
// (WaitWhenFull), never silently lost. Request bodies are encoded once per
// distinct payload, so the request path neither encodes nor allocates
// (verifying answers, when asked, decodes them).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/internal/stats"
	"github.com/ratebatch/ratebatch/kserve"
)

// FullPolicy says what happens to an arrival when MaxInFlight requests are
// already out.
type FullPolicy int

const (
	// DropWhenFull does not send it and counts it as dropped_by_client; the
	// schedule of later arrivals is kept.
	DropWhenFull FullPolicy = iota
	// WaitWhenFull sends it as soon as a request finishes; later arrivals
	// queue behind it, and the delay shows in Record.Lag.
	WaitWhenFull
)

// Config describes one run. Target, Model, Rate and Duration are required.
type Config struct {
	Target  string // base URL of the server, e.g. http://127.0.0.1:8000
	Model   string
	Version string // empty: the server's default version

	Rate     Rate          // arrival rate, e.g. ConstantRate(100) or a trace
	Duration time.Duration // how long arrivals are generated
	// Requests, when > 0, ends the arrivals after this many, even before
	// Duration. With MaxInFlight 1, OnFull WaitWhenFull and a rate far above
	// the server's, it makes a closed loop of exactly Requests requests.
	Requests int
	Seed     uint64 // arrivals and input data are a function of the seed

	Rows   int  // rows (batch dimension) per request; 0 means 1
	Binary bool // Triton's binary tensor extension instead of JSON
	// GRPC sends ModelInfer over KServe v2 gRPC instead of HTTP; Target is
	// then host:port (or grpc://host:port) of the gRPC port.
	GRPC bool
	// Inputs to send; empty: ask the target (GET /v2/models/{model}).
	Inputs []kserve.TensorMetadata
	// Payloads is how many distinct request bodies to prebuild; request i
	// uses body i mod Payloads. 0: up to 1024, within 64 MiB.
	Payloads int

	// Verify checks every 200 answer against its own request and counts a
	// wrong one as a "mismatch" error; Verifier, or else the built-in
	// verifier of Model, does the check.
	Verify   bool
	Verifier Verifier

	Timeout     time.Duration // per request, connect to last byte; 0 means 10s
	MaxInFlight int           // requests out at once; 0 means 1024
	OnFull      FullPolicy

	// Warmup, when positive, offers the run's starting rate for this long
	// before the run, on the same connections, and leaves it out of the
	// records: the run then meets the target with the connections its rate
	// needs already open. Started cold at a high rate, a run opens them all
	// in its first milliseconds, and a proxy that must accept each one (and
	// dial the upstream for it) falls behind, which opens more: a queue
	// that says more about the start than about the rate
	// (docs/results/benchmarks.md, "The highest sustainable rate").
	Warmup time.Duration

	// Progress, when set, is called every ProgressInterval (0 means 1s)
	// from a goroutine of its own while the run lasts.
	Progress         func(Snapshot)
	ProgressInterval time.Duration
}

// Snapshot is the progress of a run at one moment, for live displays.
type Snapshot struct {
	Elapsed                                  time.Duration
	Scheduled, Sent, OK, Errors, Dropped     int64 // since the start
	InFlight                                 int64
	TargetRPS                                float64 // Rate.RateAt(Elapsed)
	SentRPS, OKRPS                           float64 // over the last interval
	P50LatencyMs, P99LatencyMs, MaxLatencyMs float64 // ok answers of the last interval; 0 if none
}

// Result is the outcome of a run: the account and every request.
type Result struct {
	Summary Summary
	Records []Record // in arrival order
	// FirstVerifyError describes the first failed verification, if any.
	FirstVerifyError string
	// Payloads is how many distinct request bodies were prebuilt.
	Payloads int
	// Warmup accounts for the requests of Config.Warmup, which are not in
	// Records or Summary (zero without a warm-up).
	Warmup Summary
}

// ErrUnverified is Result.Verified's error.
var ErrUnverified = errors.New("answers failed verification")

// Verified is nil when no answer failed Config.Verify, and otherwise says
// how many failed and how the first did. A verified run that fails it is a
// failed run: `ratebatch load --verify` exits non-zero, because an answer
// that is not its caller's is a broken proxy, whatever the latencies.
func (r Result) Verified() error {
	if bad := r.Summary.Unverified(); bad > 0 {
		return fmt.Errorf("%d %w; the first: %s", bad, ErrUnverified, r.FirstVerifyError)
	}
	return nil
}

const (
	defaultTimeout     = 10 * time.Second
	defaultMaxInFlight = 1024
)

func (c *Config) check() error {
	switch {
	case c.Duration <= 0:
		return fmt.Errorf("duration must be positive, got %v", c.Duration)
	case c.Duration > maxRunLength:
		return fmt.Errorf("duration %v is longer than the %v a run may last", c.Duration, maxRunLength)
	case c.Requests < 0:
		return fmt.Errorf("requests must be >= 0 (0: no limit), got %d", c.Requests)
	case c.Rows < 0:
		return fmt.Errorf("rows per request must be at least 1, got %d", c.Rows)
	case c.Payloads < 0:
		return fmt.Errorf("payloads must be positive (or 0 for automatic), got %d", c.Payloads)
	case c.Timeout < 0:
		return fmt.Errorf("timeout must be positive, got %v", c.Timeout)
	case c.MaxInFlight < 0:
		return fmt.Errorf("max in-flight must be positive, got %d", c.MaxInFlight)
	case c.MaxInFlight > 1<<16:
		return fmt.Errorf("max in-flight %d is more connections than one client should open (at most 65536)", c.MaxInFlight)
	case c.OnFull != DropWhenFull && c.OnFull != WaitWhenFull:
		return fmt.Errorf("unknown full-pool policy %d", c.OnFull)
	case c.GRPC && c.Binary:
		return errors.New("binary is an HTTP form; gRPC always sends tensors as raw bytes")
	case c.ProgressInterval < 0:
		return fmt.Errorf("progress interval must be positive, got %v", c.ProgressInterval)
	case c.Warmup < 0 || c.Warmup > maxRunLength:
		return fmt.Errorf("warm-up must be between 0 and %v, got %v", maxRunLength, c.Warmup)
	}
	if c.Rows == 0 {
		c.Rows = 1
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = defaultMaxInFlight
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = time.Second
	}
	return nil
}

// Run offers the configured load and returns when every request sent has
// been answered or has failed. When ctx is canceled it stops sending,
// abandons the requests in flight (kind "canceled") and returns the partial
// result together with an error wrapping ctx.Err().
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.check(); err != nil {
		return Result{}, err
	}
	arr, err := newArrivals(cfg.Rate, cfg.Seed, cfg.Duration)
	if err != nil {
		return Result{}, err
	}
	var verifier Verifier
	if cfg.Verify {
		verifier = cfg.Verifier
		if verifier == nil {
			v, ok := VerifierFor(cfg.Model)
			if !ok {
				return Result{}, fmt.Errorf("cannot verify model %q: no built-in verifier (there are for %s)", cfg.Model, strings.Join(verifiable(), ", "))
			}
			verifier = v
		}
	}
	client, inputs, err := connect(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer client.close()
	payloads, err := buildPayloads(inputs, cfg.Rows, cfg.Payloads, cfg.Binary || cfg.GRPC, cfg.Seed, maxPayloadBytes)
	if err == nil && cfg.GRPC {
		err = marshalGRPC(payloads, cfg.Model, cfg.Version)
	}
	if err != nil {
		return Result{}, fmt.Errorf("model %q: %w", cfg.Model, err)
	}
	var warm Summary
	if cfg.Warmup > 0 {
		if warm, err = warmUp(ctx, cfg, client, payloads); err != nil {
			return Result{}, err
		}
	}
	res, err := newRunner(cfg, client, payloads, verifier).run(ctx, arr)
	res.Warmup = warm
	return res, err
}

func newRunner(cfg Config, client transport, payloads []payload, verifier Verifier) *runner {
	return &runner{
		cfg:      cfg,
		client:   client,
		payloads: payloads,
		verifier: verifier,
		jobs:     make(chan job),
		book:     newRecordBook(bookSize(cfg)),
	}
}

// warmUp offers cfg's starting rate for cfg.Warmup on client, unrecorded
// and unverified, and returns its account. Its arrivals are drawn from a
// seed of their own, so the run's arrivals are the same with or without
// a warm-up.
func warmUp(ctx context.Context, cfg Config, client transport, payloads []payload) (Summary, error) {
	rate := cfg.Rate.RateAt(0)
	if rate <= 0 {
		return Summary{}, nil // a run that starts idle has nothing to warm
	}
	w := cfg
	w.Rate, w.Duration, w.Seed = ConstantRate(rate), cfg.Warmup, cfg.Seed^0x5741524d // "WARM"
	w.Requests, w.Progress = 0, nil
	arr, err := newArrivals(w.Rate, w.Seed, w.Duration)
	if err != nil {
		return Summary{}, fmt.Errorf("warm-up: %w", err)
	}
	res, err := newRunner(w, client, payloads, nil).run(ctx, arr)
	if err != nil {
		return res.Summary, fmt.Errorf("warm-up: %w", err)
	}
	return res.Summary, nil
}

// connect makes the run's client for the target's protocol and learns the
// inputs to send (Config.Inputs, or else the target's model metadata).
func connect(ctx context.Context, cfg Config) (transport, []kserve.TensorMetadata, error) {
	inputs := cfg.Inputs
	if cfg.GRPC {
		addr, err := grpcTarget(cfg.Target, cfg.Model)
		if err != nil {
			return nil, nil, err
		}
		if len(inputs) == 0 {
			mctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			md, err := FetchMetadataGRPC(mctx, cfg.Target, cfg.Model, cfg.Version)
			cancel()
			if err != nil {
				return nil, nil, err
			}
			inputs = md.Inputs
		}
		c, err := newGRPCClient(addr, cfg.Timeout)
		return c, inputs, err
	}
	ep, err := parseEndpoint(cfg.Target, cfg.Model, cfg.Version)
	if err != nil {
		return nil, nil, err
	}
	if len(inputs) == 0 {
		md, err := FetchMetadata(ctx, &http.Client{Timeout: cfg.Timeout}, cfg.Target, cfg.Model, cfg.Version)
		if err != nil {
			return nil, nil, err
		}
		inputs = md.Inputs
	}
	return newHTTPClient(ep, cfg.MaxInFlight, cfg.Timeout), inputs, nil
}

func bookSize(cfg Config) int {
	n := expectedArrivals(cfg.Rate, cfg.Duration)
	if cfg.Requests > 0 {
		n = min(n, cfg.Requests)
	}
	return n
}

// expectedArrivals estimates the arrivals of a run from the mean rate, with
// a margin of six standard deviations, so the records rarely outgrow their
// preallocated slice.
func expectedArrivals(rate Rate, d time.Duration) int {
	const samples = 1000
	var sum float64
	for i := range samples {
		sum += rate.RateAt(time.Duration((float64(i) + 0.5) / samples * float64(d)))
	}
	mean := sum / samples * d.Seconds()
	if mean > 1<<23 || math.IsNaN(mean) {
		return 1 << 23 // 400 MB of records; more grows in chunks
	}
	return int(mean+6*math.Sqrt(mean)) + 64
}

type job struct {
	rec *Record
	due time.Duration
	p   *payload
}

type runner struct {
	cfg      Config
	client   transport
	payloads []payload
	verifier Verifier
	jobs     chan job
	book     *recordBook
	start    time.Time

	scheduled, sent, dropped, ok, errs atomic.Int64

	windows []*window // per worker; nil without Progress

	verifyOnce sync.Once
	verifyErr  string
}

// window collects one worker's ok latencies between two progress snapshots.
type window struct {
	mu  sync.Mutex
	lat []time.Duration
}

func (r *runner) run(ctx context.Context, arr *arrivals) (Result, error) {
	// A canceled run closes the connections, so requests in flight end now
	// rather than at their timeout.
	stopAbort := context.AfterFunc(ctx, r.client.abort)
	defer stopAbort()

	var workers, ready sync.WaitGroup
	for range r.cfg.MaxInFlight {
		var win *window
		if r.cfg.Progress != nil {
			win = &window{}
			r.windows = append(r.windows, win)
		}
		s := r.client.newSession(r.cfg.Binary)
		ready.Add(1)
		workers.Go(func() {
			ready.Done()
			for j := range r.jobs {
				r.serve(ctx, s, win, j)
			}
		})
	}
	// The first arrivals must find workers waiting, or a run with a full
	// pool policy of drop would drop them before any worker started.
	ready.Wait()
	runtime.Gosched()

	r.start = time.Now()
	progressDone := make(chan struct{})
	var progress sync.WaitGroup
	if r.cfg.Progress != nil {
		progress.Go(func() { r.reportProgress(progressDone) })
	}

	window := r.schedule(ctx, arr)
	close(r.jobs)
	workers.Wait()
	elapsed := time.Since(r.start)
	close(progressDone)
	progress.Wait()

	records := r.book.records()
	res := Result{
		Summary:          Summarize(records, window, elapsed),
		Records:          records,
		FirstVerifyError: r.verifyErr,
		Payloads:         len(r.payloads),
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("load run canceled after %v: %w", window.Round(time.Millisecond), err)
	}
	return res, nil
}

// schedule issues the arrivals until the end of the run or ctx is done and
// returns how long it sent.
func (r *runner) schedule(ctx context.Context, arr *arrivals) time.Duration {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	done := ctx.Done()
	for seq := 0; ; seq++ {
		if r.cfg.Requests > 0 && seq == r.cfg.Requests {
			return time.Since(r.start)
		}
		due, more := arr.next()
		if !more {
			due = r.cfg.Duration // wait for the window to end
		}
		if wait := due - time.Since(r.start); wait > 0 {
			timer.Reset(wait)
			select {
			case <-done:
				timer.Stop()
				return time.Since(r.start)
			case <-timer.C:
			}
		} else {
			select {
			case <-done:
				return time.Since(r.start)
			default:
			}
		}
		if !more {
			return due // the run lasts Duration even when arrivals end earlier
		}
		j := job{rec: r.book.take(), due: due, p: &r.payloads[seq%len(r.payloads)]}
		r.scheduled.Add(1)
		r.sent.Add(1) // before the hand-off, so that ok+errors never pass it
		if r.cfg.OnFull == WaitWhenFull {
			select {
			case r.jobs <- j:
			case <-done:
				// Never sent and the run is over: it was not an arrival
				// of this run after all.
				r.book.untake()
				r.scheduled.Add(-1)
				r.sent.Add(-1)
				return time.Since(r.start)
			}
			continue
		}
		select {
		case r.jobs <- j:
		default:
			r.sent.Add(-1)
			r.dropped.Add(1)
			*j.rec = Record{Start: due, Err: KindDropped}
		}
	}
}

// serve sends one request and records what happened.
func (r *runner) serve(ctx context.Context, s sender, win *window, j job) {
	sent := time.Now()
	a, err := s.post(j.p)
	lat := time.Since(sent)
	rec := j.rec
	rec.Start = sent.Sub(r.start)
	rec.Lag = max(rec.Start-j.due, 0)
	rec.Latency = lat
	rec.Status = a.status
	rec.Bytes = len(a.body)
	switch {
	case err != nil && ctx.Err() != nil:
		rec.Err = KindCanceled
	case err != nil:
		rec.Err = classify(err)
	case a.status != http.StatusOK:
		rec.Err = KindStatus
	case r.verifier != nil:
		rec.Err = r.check(j.p, a)
	}
	if rec.Err != KindNone {
		r.errs.Add(1)
		return
	}
	r.ok.Add(1)
	if win != nil {
		win.mu.Lock()
		win.lat = append(win.lat, lat)
		win.mu.Unlock()
	}
}

// check decodes an answer and verifies it against its request.
func (r *runner) check(p *payload, a answer) ErrorKind {
	kind, err := verifyAnswer(r.verifier, p, a)
	if err != nil {
		r.verifyOnce.Do(func() { r.verifyErr = err.Error() })
	}
	return kind
}

func verifyAnswer(v Verifier, p *payload, a answer) (ErrorKind, error) {
	resp, err := decodeAnswer(a)
	if err != nil {
		return KindDecode, fmt.Errorf("request %s: undecodable answer: %w", p.id, err)
	}
	if resp.ID != "" && resp.ID != p.id {
		return KindMismatch, fmt.Errorf("request %s: answer carries id %q", p.id, resp.ID)
	}
	if err := v.Verify(p.inputs, resp.Outputs); err != nil {
		return KindMismatch, fmt.Errorf("request %s: %w", p.id, err)
	}
	return KindNone, nil
}

func decodeAnswer(a answer) (*kserve.Response, error) {
	if a.grpc {
		return decodeGRPCAnswer(a.body)
	}
	headerLen, err := kserve.ParseHeaderLength(string(a.headerLen), len(a.body))
	if err != nil {
		return nil, err
	}
	return kserve.DecodeResponse(a.body, headerLen)
}

// reportProgress calls Config.Progress every interval until done.
func (r *runner) reportProgress(done <-chan struct{}) {
	interval := r.cfg.ProgressInterval
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var lastSent, lastOK int64
	last := r.start
	var lat []time.Duration
	for {
		select {
		case <-done:
			return
		case now := <-ticker.C:
			lat = lat[:0]
			for _, w := range r.windows {
				w.mu.Lock()
				lat = append(lat, w.lat...)
				w.lat = w.lat[:0]
				w.mu.Unlock()
			}
			slices.Sort(lat)
			secs := now.Sub(last).Seconds()
			last = now
			snap := Snapshot{
				Elapsed:   now.Sub(r.start),
				Scheduled: r.scheduled.Load(),
				Dropped:   r.dropped.Load(),
				OK:        r.ok.Load(),
				Errors:    r.errs.Load(),
				Sent:      r.sent.Load(),
			}
			snap.InFlight = max(snap.Sent-snap.OK-snap.Errors, 0)
			if snap.Elapsed < r.cfg.Duration {
				snap.TargetRPS = r.cfg.Rate.RateAt(snap.Elapsed)
			}
			snap.SentRPS = float64(snap.Sent-lastSent) / secs
			snap.OKRPS = float64(snap.OK-lastOK) / secs
			lastSent, lastOK = snap.Sent, snap.OK
			if len(lat) > 0 {
				snap.P50LatencyMs = ms(stats.Percentile(lat, 50))
				snap.P99LatencyMs = ms(stats.Percentile(lat, 99))
				snap.MaxLatencyMs = ms(lat[len(lat)-1])
			}
			r.cfg.Progress(snap)
		}
	}
}

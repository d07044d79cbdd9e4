package replay

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/batchcost"
)

var line = batchcost.Profile{Name: "line", Latency: batchcost.Latency{AlphaMs: 1, Tau0Ms: 4}, MaxBatch: 8,
	Energy: batchcost.Energy{BetaMJ: 10, Zeta0MJ: 30}, HasEnergy: true}

// Closed-loop clients beside arrival times send only within their span:
// from ClientsFrom to ClientsUntil, so a run with both ends.
func TestClientsSpan(t *testing.T) {
	arrivals := []time.Duration{0, time.Second, 2 * time.Second}
	res, err := Run(context.Background(), Config{Profile: line, Policy: policy.Adhoc{}, Arrivals: arrivals,
		Clients: 2, Think: 5 * time.Millisecond, ClientsFrom: 500 * time.Millisecond, ClientsUntil: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Two clients, each 5 ms of compute and 5 of thinking a call, for a
	// second: about 200 calls, and the three arrivals.
	if res.Requests < 150 || res.Requests > 250 {
		t.Errorf("%d requests, want about 203", res.Requests)
	}
	for _, bad := range []Config{{ClientsFrom: -1}, {ClientsFrom: time.Second, ClientsUntil: time.Millisecond}} {
		bad.Profile, bad.Policy, bad.Arrivals = line, policy.Adhoc{}, arrivals
		if err := bad.Validate(); err == nil {
			t.Errorf("clients from %v until %v accepted", bad.ClientsFrom, bad.ClientsUntil)
		}
	}
}

// Closed-loop clients beside arrival times: every arrival is replayed,
// and the clients' calls besides.
func TestClientsBesideArrivals(t *testing.T) {
	var arrivals []time.Duration
	for i := range 1000 {
		arrivals = append(arrivals, time.Duration(i)*10*time.Millisecond)
	}
	res, err := Run(context.Background(), Config{Profile: line, Policy: policy.Adhoc{}, Arrivals: arrivals,
		Clients: 4, Think: 300 * time.Millisecond, ClientsFrom: time.Second, ClientsUntil: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Four clients, each a call about every 305 ms for 7 s: about 92.
	if clients := res.Requests - len(arrivals); clients < 80 || clients > 100 {
		t.Errorf("%d requests: %d beyond the %d arrivals, want about 92 of the clients", res.Requests, clients, len(arrivals))
	}
}

// timed makes every batch starting in the second second 10 times slower.
type timed struct{}

func (timed) BatchMs(_ *rand.Rand, m float64) float64 { return m }
func (timed) BatchMsAt(_ *rand.Rand, at time.Duration, m float64) float64 {
	if at >= time.Second && at < 2*time.Second {
		return 10 * m
	}
	return m
}

// A timed spread is asked with each batch's start; Pace is called as the
// run goes.
func TestTimedSpreadAndPace(t *testing.T) {
	var arrivals []time.Duration
	for i := range 1500 { // more events than PaceEvery
		arrivals = append(arrivals, time.Duration(i)*2*time.Millisecond)
	}
	paced := 0
	run := func(s Spread) Result {
		res, err := Run(context.Background(), Config{Profile: line, Policy: policy.Adhoc{}, Arrivals: arrivals, Spread: s, Pace: func() { paced++ }})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	plain, slow := run(nil), run(timed{})
	if !(slow.MaxLatencyMs > 5*plain.MaxLatencyMs) || slow.Batches >= plain.Batches {
		t.Errorf("a slow second: max latency %.1f ms against %.1f, %d batches against %d; want it slower and batching more",
			slow.MaxLatencyMs, plain.MaxLatencyMs, slow.Batches, plain.Batches)
	}
	if paced == 0 {
		t.Error("Pace was never called")
	}
}

// A stepped run is a run whose arrivals come one by one.
func TestStepperIsARun(t *testing.T) {
	arrivals := []time.Duration{time.Millisecond, 2 * time.Millisecond, 30 * time.Millisecond}
	want, err := Run(context.Background(), Config{Profile: line, Policy: policy.Adhoc{}, Arrivals: arrivals})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStepper(Config{Profile: line, Policy: policy.Adhoc{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range arrivals {
		if err := s.Arrive(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
	if s.Unanswered() == 0 {
		t.Error("nothing unanswered right after the last arrival")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := s.Totals()
	if len(got.Latencies) != want.Requests || got.Batches != want.Batches || got.LastDone.Seconds() != want.DurationS {
		t.Errorf("stepped: %d requests, %d batches, done at %v; run: %d, %d, %v s", len(got.Latencies), got.Batches, got.LastDone, want.Requests, want.Batches, want.DurationS)
	}
	if _, err := NewStepper(Config{Profile: line, Policy: policy.Adhoc{}, RatePerSec: 1}); err == nil {
		t.Error("a stepped run with a rate of its own was accepted")
	}
}

// flat is the line itself.
type flat struct{}

func (flat) BatchMs(_ *rand.Rand, m float64) float64 { return m }

// stalled holds instances and answers 20 ms longer for batches ending in
// the second second.
type stalled struct{ flat }

func (stalled) HoldAt(at time.Duration, _ int) time.Duration  { return stall(at) }
func (stalled) AfterAt(at time.Duration, _ int) time.Duration { return stall(at) }

func stall(at time.Duration) time.Duration {
	if at >= time.Second && at < 2*time.Second {
		return 20 * time.Millisecond
	}
	return 0
}

// A spread with the proxy's stalls holds instances and answers longer
// where they say, beyond the measured means.
func TestProxyStalls(t *testing.T) {
	var arrivals []time.Duration
	for i := range 300 {
		arrivals = append(arrivals, time.Duration(i)*10*time.Millisecond)
	}
	run := func(s Spread) Result {
		res, err := Run(context.Background(), Config{Profile: line, Policy: policy.Adhoc{}, Arrivals: arrivals, Spread: s})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	plain, slow := run(flat{}), run(stalled{})
	// In the second second every answer waits 20 ms more, and the
	// instance is held 20 ms after each batch: calls queue behind it.
	if !(slow.MeanLatencyMs > plain.MeanLatencyMs+20.0/3) || !(slow.MaxLatencyMs >= plain.MaxLatencyMs+20) {
		t.Errorf("stalled: mean %.2f max %.2f ms; without: mean %.2f max %.2f", slow.MeanLatencyMs, slow.MaxLatencyMs, plain.MeanLatencyMs, plain.MaxLatencyMs)
	}
}

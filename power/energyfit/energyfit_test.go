package energyfit

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/power"
)

// counterSource is a GPU whose energy counter the test sets.
type counterSource struct {
	now    func() time.Time
	energy float64
}

func (*counterSource) Name() string { return "test" }
func (*counterSource) Close() error { return nil }
func (s *counterSource) Read(context.Context) ([]power.Reading, error) {
	return []power.Reading{{Time: s.now(), GPU: "gpu0", EnergyJ: s.energy, HasEnergy: true, PowerW: 50}}, nil
}

type estimateRecorder struct{ last *policy.Estimate }

func (*estimateRecorder) Name() string { return "recorder" }
func (r *estimateRecorder) Plan(e policy.Estimate) policy.Rule {
	*r.last = e
	return policy.Fill{Policy: "recorder", Batch: 1}
}

// The fitter learns zeta(b) from the meter's window energy against the
// dispatcher's batches and rows and hands it to the model's monitor.
func TestEnergyFitterFeedsTheMonitor(t *testing.T) {
	const beta, zeta0 = 19.9, 19.6 // mJ
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	src := &counterSource{now: now}
	meter, err := power.NewMeter(src, power.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	var est policy.Estimate
	mon, err := monitor.New(monitor.Config{Model: "m", Policy: &estimateRecorder{last: &est}, Window: time.Second, MaxBatch: 8, Instances: 1, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	var batches, rows int64
	f := New(meter,
		func() []dispatcher.Snapshot {
			return []dispatcher.Snapshot{{Model: "m", BatchesSent: batches, RowsSent: rows}}
		},
		func() []*monitor.Monitor { return []*monitor.Monitor{mon} })
	ctx := context.Background()
	for i := range 12 {
		n, size := int64(40+5*i), int64(1+i%4)
		batches += n
		rows += n * size
		span := meter.Begin("m", "") // the GPU is busy all window
		src.energy += (zeta0*float64(n) + beta*float64(n*size)) / 1000
		clock = clock.Add(time.Second)
		if err := meter.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		span.End(int(n * size))
		f.Step()
	}
	mon.Tick()
	if !est.HasEnergy || math.Abs(est.BetaMJ-beta) > 0.01*beta || math.Abs(est.Zeta0MJ-zeta0) > 0.01*zeta0 {
		t.Fatalf("monitor plans with energy %v: beta %.4g zeta0 %.4g, want %v %v", est.HasEnergy, est.BetaMJ, est.Zeta0MJ, beta, zeta0)
	}
	if st := f.Status()["m"]; !strings.Contains(st, "meter fit") {
		t.Errorf("status %q", st)
	}
}

func TestEnergyFitterWithoutMeter(t *testing.T) {
	meter, err := power.NewMeter(power.None{}, power.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := New(meter, func() []dispatcher.Snapshot { return nil }, func() []*monitor.Monitor { return nil })
	f.Step()
	if st := f.Status()["*"]; !strings.Contains(st, "busy time") {
		t.Errorf("status without a meter %q, want it to say energy follows busy time", st)
	}
}

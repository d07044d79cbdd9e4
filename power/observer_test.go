package power

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
)

// The meter learns a batch the same from the dispatcher's events
// (Meter.Observer) as from Begin and Span.End: its busy time, its power and
// the requests it served.
func TestObserverIsBeginAndEnd(t *testing.T) {
	run := func(batch func(m *Meter, clock *fakeClock) (end func(served int))) []byte {
		clock := newFakeClock()
		src := &scriptSource{clock: clock}
		m := newTestMeter(t, src, clock)
		energy := 0.0
		poll := func(w float64) {
			clock.Advance(time.Second)
			energy += w
			src.next = []Reading{counterGPU("GPU-0", energy, w)}
			m.Poll(context.Background())
		}
		src.next = []Reading{counterGPU("GPU-0", energy, 50)}
		m.Poll(context.Background())
		for range 3 {
			poll(50)
		}
		end := batch(m, clock)
		for range 4 {
			poll(250)
		}
		end(40)
		poll(50)
		out, err := json.Marshal(m.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	direct := run(func(m *Meter, _ *fakeClock) func(int) { return m.Begin("resnet", "").End })
	observed := run(func(m *Meter, clock *fakeClock) func(int) {
		obs := m.Observer()
		b := &dispatcher.Batch{Model: "resnet", Rows: 40, Started: clock.Now()}
		obs.BatchStarted(b)
		return func(served int) {
			obs.BatchEnded(b, dispatcher.BatchEnd{At: clock.Now(), Rows: 40, Calls: 40, OK: true, Served: served})
		}
	})
	if string(direct) != string(observed) {
		t.Fatalf("observed batch:\n%s\nwant as Begin/End:\n%s", observed, direct)
	}
	var s Snapshot
	if err := json.Unmarshal(observed, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Models) != 1 || s.Models[0].Model != "resnet" || s.Models[0].BatchSeconds != 4 ||
		s.Windows[TotalWindow].Requests != 40 || len(s.GPUs) != 1 || s.GPUs[0].BusySeconds != 4 {
		t.Fatalf("snapshot %s: want one model's 4 s batch of 40 requests, 4 busy seconds", observed)
	}
}

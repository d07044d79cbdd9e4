package power

import "github.com/ratebatch/ratebatch/dispatcher"

// Observer is the meter as a dispatcher.Observer of every model: each
// batch's start and end mark the GPUs behind the proxy busy (as Begin and
// Span.End), and its end counts the requests it served. It takes the
// times the events carry, read on the dispatcher's clock, which must then
// be the meter's (both time.Now in serve): the request path reads the
// clock once for both.
func (m *Meter) Observer() dispatcher.Observer { return batchObserver{m: m} }

type batchObserver struct {
	dispatcher.NopObserver // arrivals, decisions and answers spend nothing
	m                      *Meter
}

func (o batchObserver) BatchStarted(b *dispatcher.Batch) { o.m.begin(b.Model, "", b.Started) }

func (o batchObserver) BatchEnded(b *dispatcher.Batch, e dispatcher.BatchEnd) {
	o.m.end(b.Model, "", e.At, e.At.Sub(b.Started), e.Served)
}

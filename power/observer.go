package power

import "github.com/ratebatch/ratebatch/dispatcher"

// Observer is the meter as a dispatcher.Observer of every model: each
// batch's start and end mark the GPUs behind the proxy busy (as Begin and
// Span.End), and its end counts the requests it served. The batch's time
// is the dispatcher's, from its start to its end.
func (m *Meter) Observer() dispatcher.Observer { return batchObserver{m: m} }

type batchObserver struct {
	dispatcher.NopObserver // arrivals, decisions and answers spend nothing
	m                      *Meter
}

func (o batchObserver) BatchStarted(b *dispatcher.Batch) { o.m.Begin(b.Model, "") }

func (o batchObserver) BatchEnded(b *dispatcher.Batch, e dispatcher.BatchEnd) {
	o.m.end(b.Model, "", o.m.opts.Now(), e.At.Sub(b.Started), e.Served)
}

// Package servertest runs `ratebatch serve` in-process for end-to-end
// tests, as net/http/httptest runs a handler: the whole process that
// server.New assembles, on loopback listeners, in front of a given
// upstream, stopped when the test ends, with its parts in reach.
package servertest

import (
	"context"
	"log/slog"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/server"
)

// Proxy is a running `ratebatch serve`.
type Proxy struct {
	*server.Server
	Base, Admin string // the data port's and the admin port's base URLs
	// Stop shuts the proxy down gracefully and reports an error of Run;
	// it is safe to call more than once (the test's cleanup calls it).
	Stop func()
}

// Long reports whether the long versions of the end-to-end tests run
// (RATEBATCH_LONG set; `make test-long`): the figures of docs/LEARNING.md
// and docs/results/ come from them.
func Long() bool { return os.Getenv("RATEBATCH_LONG") != "" }

// Start runs the proxy against upstream (host:port of an HTTP KServe v2
// server), logging to log (nil: discarded), and waits until it has
// discovered the upstream's model "simple".
func Start(t testing.TB, upstream string, log *slog.Logger, edit func(*config.Config)) *Proxy {
	t.Helper()
	p := Run(t, upstream, log, edit)
	testpoll.Until(t, "the proxy to discover the upstream's model simple", func() bool {
		_, ok := p.Dispatcher().Model("simple")
		return ok
	})
	return p
}

// Run starts the proxy without waiting for the upstream. The
// configuration is the default with loopback listeners on free ports, the
// admin token "test-token", a 100 ms policy window and 5 s of grace, then
// edit's changes.
func Run(t testing.TB, upstream string, log *slog.Logger, edit func(*config.Config)) *Proxy {
	t.Helper()
	cfg := config.Default()
	cfg.Upstream = "http://" + upstream
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.AdminToken = "test-token"
	cfg.Policy.Window = 100 * time.Millisecond
	cfg.Grace = 5 * time.Second
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s, err := server.New(&cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	p := &Proxy{Server: s, Base: "http://" + s.Addr().String(), Admin: "http://" + s.AdminAddr().String()}
	p.Stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(p.Stop)
	return p
}

// MeanBatch is the proxy's mean batch size so far, from its metrics; NaN
// before the first batch.
func (p *Proxy) MeanBatch(t testing.TB) float64 {
	t.Helper()
	sum, n := p.Histogram(t, "ratebatch_batch_size")
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// Histogram returns the sum and count of one of the proxy's histograms,
// over all its series.
func (p *Proxy) Histogram(t testing.TB, name string) (sum float64, count uint64) {
	t.Helper()
	fams, err := p.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range fams {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				sum += h.GetSampleSum()
				count += h.GetSampleCount()
			}
		}
	}
	return sum, count
}

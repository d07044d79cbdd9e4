package whatif

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/policy"
)

// gatedModels holds each setting's replay until the test opens the gate.
type gatedModels struct {
	fakeModels
	gate chan struct{}
	once sync.Once
}

func (g *gatedModels) NewPolicy(model, name string, set map[string]string, tune func(*policy.Options)) (policy.Policy, error) {
	<-g.gate
	return g.fakeModels.NewPolicy(model, name, set, tune)
}

func (g *gatedModels) open() { g.once.Do(func() { close(g.gate) }) }

func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// GET /whatif runs the what-if in the background: a request waits for it
// a while, else gets 202 and its progress; another question meanwhile
// gets 429 with Retry-After; once done, the answer (200) carries, for each
// setting but the one in force, the command that applies it. Questions
// that cannot be asked are 400, a model never seen 404.
func TestWhatIfHandler(t *testing.T) {
	l := newLived(t, 300, 5*time.Second, 20)
	models := &gatedModels{fakeModels: fakeModels{mon: l.mon, name: policy.NameBudget}, gate: make(chan struct{})}
	t.Cleanup(models.open)
	p := NewReplayer(l.rec, models, Config{CPU: 1})
	mux := http.NewServeMux()
	mux.Handle("/whatif", p.Handler())
	mux.Handle("/arrivals", l.rec.ArrivalsHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, q := range []string{"minutes=-1", "minutes=31", "minutes=x", "p99_ms=0", "wait=1h"} {
		if code, _, body := get(t, srv.URL+"/whatif?model=m&"+q); code != http.StatusBadRequest || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %s, want 400 with an error", q, code, body)
		}
	}
	if code, _, _ := get(t, srv.URL+"/whatif?model=nobody&wait=0s"); code != http.StatusNotFound {
		t.Errorf("a model never recorded: %d, want 404", code)
	}
	code, hdr, body := get(t, srv.URL+"/whatif?model=m&minutes=1&wait=0s")
	var prog Progress
	if err := json.Unmarshal([]byte(body), &prog); code != http.StatusAccepted || err != nil || !prog.Running || hdr.Get("Retry-After") == "" {
		t.Fatalf("running: %d %s (Retry-After %q), want 202 with its progress", code, body, hdr.Get("Retry-After"))
	}
	if code, hdr, _ := get(t, srv.URL+"/whatif?model=m&minutes=2&wait=0s"); code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Errorf("another question while one runs: %d (Retry-After %q), want 429 with Retry-After", code, hdr.Get("Retry-After"))
	}
	models.open()
	var rep Report
	// Each ask waits up to 25 s for the answer (slow under the race
	// detector on a busy machine).
	for i := 0; i < 8 && code != http.StatusOK; i++ {
		code, _, body = get(t, srv.URL+"/whatif?model=m&minutes=1&wait=25s")
	}
	if code != http.StatusOK {
		t.Fatalf("no answer after 8 asks: %d %.300s", code, body)
	}
	if err := json.Unmarshal([]byte(body), &rep); err != nil || !rep.Enough {
		t.Fatalf("answer %v: %.500s", err, body)
	}
	for _, pt := range rep.Points {
		if pt.Current != (pt.Apply == "") {
			t.Errorf("%s: apply %q", pt.Label, pt.Apply)
		}
		if pt.Apply == "" {
			continue
		}
		// curl ... -d '{json}' URL: the body is a PUT /policy of this model.
		js := pt.Apply[strings.Index(pt.Apply, "'")+1 : strings.LastIndex(pt.Apply, "'")]
		var put map[string]string
		if err := json.Unmarshal([]byte(js), &put); err != nil || put["model"] != "m" || put["policy"] != pt.Policy || !strings.HasSuffix(pt.Apply, srv.Listener.Addr().String()+"/policy") {
			t.Errorf("%s: apply %q does not PUT its setting to this port's /policy", pt.Label, pt.Apply)
		}
	}
	// The same question again is the answer kept; the export is a trace.
	if code, _, again := get(t, srv.URL+"/whatif?model=m&minutes=1&wait=0s"); code != http.StatusOK || again != body {
		t.Errorf("asked again: %d, a different answer", code)
	}
	if code, hdr, csv := get(t, srv.URL+"/arrivals?model=m&minutes=1&bin=1s"); code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/csv") || !strings.Contains(csv, "time_s,rate_rps") {
		t.Errorf("/arrivals: %d %q %.200s", code, hdr.Get("Content-Type"), csv)
	}
	if code, _, _ := get(t, srv.URL+"/arrivals?model=m&bin=1us"); code != http.StatusBadRequest {
		t.Errorf("/arrivals with a bin of 1us: %d, want 400", code)
	}
}

// With too few calls, or before a line is learnt, the what-if says so
// instead of answering.
func TestWhatIfSaysWhenItCannot(t *testing.T) {
	l := newLived(t, 5, 20*time.Second, 20)
	p := NewReplayer(l.rec, &fakeModels{mon: l.mon, name: policy.NameAdhoc}, Config{})
	rep, err := p.Run(t.Context(), Request{Model: "m", Window: time.Minute})
	if err != nil || rep.Enough || !strings.Contains(rep.Reason, "too little traffic") || len(rep.Points) != 0 {
		t.Errorf("%d calls: %v, enough %v, %q", rep.Arrivals.Total, err, rep.Enough, rep.Reason)
	}

	l = newLived(t, 300, 5*time.Second, 20)
	unfitted, err := monitor.New(monitor.Config{Model: "m", Policy: policy.Adhoc{}, Window: time.Second, MaxBatch: 8})
	if err != nil {
		t.Fatal(err)
	}
	p = NewReplayer(l.rec, &fakeModels{mon: unfitted, name: policy.NameAdhoc}, Config{})
	rep, err = p.Run(t.Context(), Request{Model: "m", Window: time.Minute})
	if err != nil || rep.Enough || !strings.Contains(rep.Reason, "no line learnt yet") {
		t.Errorf("no line: %v, enough %v, %q", err, rep.Enough, rep.Reason)
	}
}

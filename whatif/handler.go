package whatif

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/kserve"
)

// DefaultMinutes is the window a what-if or an export covers when the
// request names none.
const DefaultMinutes = 5

// Waiting for a what-if: a request waits this long for its answer by
// default (?wait= sets it, up to maxWait: the admin port's writes time out
// at 30 s), then gets 202 and asks again.
const (
	defaultWait = 20 * time.Second
	maxWait     = 25 * time.Second
)

// window reads the minutes a request asks for: a number > 0, at most the
// recorder's MaxMinutes (DefaultMinutes when absent).
func (r *Recorder) window(req *http.Request) (time.Duration, error) {
	v := req.URL.Query().Get("minutes")
	if v == "" {
		return time.Duration(min(DefaultMinutes, r.o.MaxMinutes)) * time.Minute, nil
	}
	m, err := strconv.ParseFloat(v, 64)
	if err != nil || !(m > 0) || m > float64(r.o.MaxMinutes) {
		return 0, fmt.Errorf("minutes %q: want a number of minutes > 0 and at most %d", v, r.o.MaxMinutes)
	}
	return time.Duration(m * float64(time.Minute)), nil
}

// modelOf is the model a request names, or the one model recorded when
// it names none.
func (r *Recorder) modelOf(req *http.Request) (string, error) {
	if m := req.URL.Query().Get("model"); m != "" {
		return m, nil
	}
	names := slices.Sorted(maps.Keys(*r.models.Load()))
	if len(names) == 1 {
		return names[0], nil
	}
	return "", fmt.Errorf("name the model: ?model=NAME (recorded: %s)", strings.Join(names, ", "))
}

// ArrivalsHandler serves GET /arrivals?model=M&minutes=N[&bin=100ms]: the
// model's arrivals over the last N minutes as a rate series (WriteTrace),
// for `ratebatch load --trace`. It reveals the traffic's shape: the admin
// port serves it behind its token.
func (r *Recorder) ArrivalsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		model, err := r.modelOf(req)
		if err != nil {
			kserve.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		d, err := r.window(req)
		if err != nil {
			kserve.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		bin := DefaultBin
		if v := req.URL.Query().Get("bin"); v != "" {
			if bin, err = time.ParseDuration(v); err != nil || bin < MinBin {
				kserve.WriteError(w, http.StatusBadRequest, fmt.Sprintf("bin %q: want a duration of at least %v, e.g. 100ms", v, MinBin))
				return
			}
		}
		var buf bytes.Buffer
		if err := r.WriteTrace(&buf, model, d, bin); err != nil {
			kserve.WriteError(w, statusOf(err), err.Error())
			return
		}
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", model+".arrivals.csv"))
		w.Write(buf.Bytes())
	})
}

// Handler serves GET /whatif?model=M&minutes=N[&p99_ms=X][&wait=20s]:
// the Report as JSON (200). The what-if runs in the background at its
// share of a core: a request waits for it up to wait, else gets 202, a
// progress document and Retry-After, and asks again; the answer is kept
// for the same question for a minute. One runs at a time: another
// question meanwhile gets 429 with Retry-After.
func (p *Replayer) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		q, wait, err := p.request(req)
		if err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, ErrNotRecorded) {
				status = http.StatusNotFound
			}
			kserve.WriteError(w, status, err.Error())
			return
		}
		j, err := p.start(q)
		if errors.Is(err, ErrBusy) {
			w.Header().Set("Retry-After", "5")
			kserve.WriteError(w, http.StatusTooManyRequests, "another what-if is running; ask again in a few seconds")
			return
		}
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-j.done:
		case <-timer.C:
		case <-req.Context().Done():
			return
		}
		select {
		case <-j.done:
		default:
			w.Header().Set("Retry-After", "2")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			json.NewEncoder(w).Encode(Progress{Model: j.model, Running: true, Replayed: int(j.replayed.Load()), Settings: j.settings,
				Seconds: time.Since(j.started).Seconds()})
			return
		}
		switch {
		case errors.Is(j.err, context.DeadlineExceeded):
			kserve.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("the what-if took longer than %v: ask for fewer minutes", p.c.Timeout))
			return
		case j.err != nil:
			kserve.WriteError(w, statusOf(j.err), j.err.Error())
			return
		}
		rep := j.rep
		rep.Points = slices.Clone(rep.Points)
		apply := applyCommand(req)
		for i, pt := range rep.Points {
			if !pt.Current && pt.Error == "" {
				rep.Points[i].Apply = apply(putBody(q.Model, pt))
			}
		}
		body, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			kserve.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeBody(w, body)
	})
}

// Progress is what GET /whatif answers (202) while the what-if runs.
type Progress struct {
	Model    string `json:"model"`
	Running  bool   `json:"running"`
	Replayed int    `json:"replayed"`
	Settings int    `json:"settings"`
	// Seconds is how long it has run.
	Seconds float64 `json:"seconds"`
}

func writeBody(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(body)
}

// request reads a what-if's question from the URL, and how long to wait
// for its answer.
func (p *Replayer) request(req *http.Request) (Request, time.Duration, error) {
	model, err := p.rec.modelOf(req)
	if err != nil {
		return Request{}, 0, err
	}
	d, err := p.rec.window(req)
	if err != nil {
		return Request{}, 0, err
	}
	if (*p.rec.models.Load())[model] == nil {
		return Request{}, 0, fmt.Errorf("model %q: %w", model, ErrNotRecorded)
	}
	q := Request{Model: model, Window: d}
	if v := req.URL.Query().Get("p99_ms"); v != "" {
		if q.P99Ms, err = strconv.ParseFloat(v, 64); err != nil || !(q.P99Ms > 0) {
			return Request{}, 0, fmt.Errorf("p99_ms %q: want a number of milliseconds > 0", v)
		}
	}
	wait := defaultWait
	if v := req.URL.Query().Get("wait"); v != "" {
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 || wait > maxWait {
			return Request{}, 0, fmt.Errorf("wait %q: want a duration from 0s to %v", v, maxWait)
		}
	}
	return q, wait, nil
}

// putBody is the PUT /policy body that puts a point's setting in force.
func putBody(model string, pt Point) map[string]string {
	body := map[string]string{"model": model, "policy": pt.Policy}
	for k, v := range pt.Options {
		body[k] = v
	}
	return body
}

// applyCommand makes a setting's command: a curl line that PUTs its body
// to this admin port's /policy, the token from the environment.
func applyCommand(req *http.Request) func(map[string]string) string {
	scheme := "http"
	if req.TLS != nil {
		scheme = "https"
	}
	url := scheme + "://" + req.Host + "/policy"
	return func(body map[string]string) string {
		b, _ := json.Marshal(body) // a map of strings always encodes
		return fmt.Sprintf(`curl -sS -X PUT -H "Authorization: Bearer $RATEBATCH_ADMIN_TOKEN" -d '%s' %s`,
			strings.ReplaceAll(string(b), "'", `'\''`), url)
	}
}

// statusOf is the HTTP status of a what-if's error: 404 for a model not
// recorded or not batched, else 500.
func statusOf(err error) int {
	if errors.Is(err, ErrNotRecorded) || errors.Is(err, ErrNotBatched) {
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

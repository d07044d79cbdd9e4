package proxy

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratebatch/ratebatch/kserve"
)

// AdminOptions configure the admin listener, kept off the data port.
type AdminOptions struct {
	Gatherer prometheus.Gatherer
	// Status returns the JSON-serialisable state of the proxy.
	Status func() any
	// Policies answers GET /policy: the policy in force, its name and
	// options, for every model and for each (JSON-serialisable); nil: no
	// GET /policy.
	Policies func() any
	// SetPolicy switches a model ("" for all) to a policy with options by
	// their key in the configuration's policy section, spelt as in the
	// file ("latency_budget": "1.10x"), and returns the models switched
	// once the new policy's rule is in force for each. The admin port
	// passes every option on as it came: what the options are, and
	// which a policy takes, is the caller's to say.
	SetPolicy func(ctx context.Context, model, policy string, options map[string]string) ([]string, error)
	// Logger records policy changes (who asked, what changed); nil: slog's
	// default.
	Logger *slog.Logger
	// Token guards mutating calls; empty refuses them all.
	Token string
	// Ready reports whether the proxy serves (for a readiness probe).
	Ready func() bool
	// Unready, when set, says why the proxy does not serve ("" when it
	// does) and answers /readyz in place of Ready: a 503 that names the
	// cause ("upstream refusing connections ...").
	Unready func() string
	// UI, when set, serves the live page under /ui (read-only, so like
	// /status it needs no token).
	UI http.Handler
	// Pprof mounts net/http/pprof at /debug/pprof/: CPU and allocation
	// profiles of the live process, off by default.
	Pprof bool
	// WhatIf, when set, answers GET /whatif: a model's recent arrivals
	// replayed through other settings (package whatif). Like /status it
	// needs no token: it shows figures, and bounds its own CPU.
	WhatIf http.Handler
	// Arrivals, when set, answers GET /arrivals behind the bearer token:
	// a model's recent arrivals as a rate series, which reveals its
	// traffic's shape.
	Arrivals http.Handler
}

// NewAdmin returns the admin handler: GET /metrics, GET /status,
// GET /healthz, GET /readyz, GET /policy, PUT /policy (bearer token) and,
// when enabled, the live page /ui, /debug/pprof/, GET /whatif and
// GET /arrivals (bearer token).
func NewAdmin(o AdminOptions) http.Handler {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	r := chi.NewRouter()
	r.Handle("/metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	r.Get("/status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, o.Status())
	})
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	r.Get("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if o.Unready != nil {
			if why := o.Unready(); why != "" {
				kserve.WriteError(w, http.StatusServiceUnavailable, "not ready: "+why)
				return
			}
		} else if o.Ready != nil && !o.Ready() {
			kserve.WriteError(w, http.StatusServiceUnavailable, "not ready")
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	if o.UI != nil {
		r.Handle("/ui", o.UI)
		r.Handle("/ui/*", o.UI)
	}
	if o.Pprof {
		r.HandleFunc("/debug/pprof/*", pprof.Index)
		r.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		r.HandleFunc("/debug/pprof/profile", pprof.Profile)
		r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		r.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if o.WhatIf != nil {
		r.Method(http.MethodGet, "/whatif", o.WhatIf)
	}
	if o.Arrivals != nil {
		r.Method(http.MethodGet, "/arrivals", withToken(o.Token, o.Arrivals))
	}
	if o.Policies != nil {
		r.Get("/policy", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, o.Policies())
		})
	}
	r.Put("/policy", func(w http.ResponseWriter, req *http.Request) {
		if !authorized(o.Token, req.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ratebatch admin"`)
			kserve.WriteError(w, http.StatusUnauthorized, "a valid bearer token is required (set admin_token)")
			return
		}
		ch, err := readPolicyChange(http.MaxBytesReader(w, req.Body, 4096))
		if err != nil {
			kserve.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		switched, err := o.SetPolicy(req.Context(), ch.Model, ch.Policy, ch.Options)
		if err != nil {
			kserve.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		ch.Models = switched
		log.Info("policy changed by PUT /policy", ch.logAttrs(req.RemoteAddr)...)
		writeJSON(w, http.StatusOK, ch)
	})
	return r
}

// policyChange is a PUT /policy body, {"model": "m", "policy": "budget",
// "latency_budget": "1.10x"}: every key but model and policy is an option
// of the policy, by its key in the configuration (a string, a number or a
// boolean, read as the file spells it). With the models it switched
// (Models), it is also the answer: what was set.
type policyChange struct {
	Model   string            `json:"model"`
	Policy  string            `json:"policy"`
	Options map[string]string `json:"options"`
	Models  []string          `json:"models"`
}

const policyBodyHelp = `want {"model": "name or empty for all", "policy": "name"} and the policy's options by key, e.g. "latency_budget": "1.10x"`

func readPolicyChange(body io.Reader) (policyChange, error) {
	var fields map[string]json.RawMessage
	if err := json.NewDecoder(body).Decode(&fields); err != nil {
		return policyChange{}, errors.New(policyBodyHelp)
	}
	ch := policyChange{Options: map[string]string{}}
	for k, raw := range fields {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return policyChange{}, errors.New(policyBodyHelp)
		}
		var s string
		switch x := v.(type) {
		case nil:
			continue // as if absent
		case string:
			s = x
		case float64, bool:
			s = strings.TrimSpace(string(raw)) // as written: 0.5, 4, true
		default:
			return policyChange{}, fmt.Errorf("%s: want a string, a number or true/false; %s", k, policyBodyHelp)
		}
		switch k {
		case "model":
			ch.Model = s
		case "policy":
			ch.Policy = s
		default:
			ch.Options[k] = s
		}
	}
	if ch.Policy == "" {
		return policyChange{}, errors.New(policyBodyHelp)
	}
	return ch, nil
}

// logAttrs name the change in the log: the model, the policy, each
// option set, in key order, and who asked.
func (ch policyChange) logAttrs(remote string) []any {
	model := ch.Model
	if model == "" {
		model = "(all batched models)"
	}
	attrs := []any{"model", model, "policy", ch.Policy}
	for _, k := range slices.Sorted(maps.Keys(ch.Options)) {
		attrs = append(attrs, k, ch.Options[k])
	}
	return append(attrs, "remote", remote)
}

// withToken serves next only to a request with the bearer token.
func withToken(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !authorized(token, req.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ratebatch admin"`)
			kserve.WriteError(w, http.StatusUnauthorized, "a valid bearer token is required (set admin_token)")
			return
		}
		next.ServeHTTP(w, req)
	})
}

// authorized compares the bearer token in constant time.
func authorized(token, header string) bool {
	got, ok := strings.CutPrefix(header, "Bearer ")
	if token == "" || !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

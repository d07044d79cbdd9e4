package proxy

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/pprof"
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
	// SetPolicy switches a model ("" for all) to a policy and returns once
	// the new policy's rule is in force, so the answer shows the new state.
	SetPolicy func(ctx context.Context, model, policy string) error
	// SetPolicyBudget switches a model ("" for all) to the budget policy
	// with the given latency budget, as SetPolicy does; nil refuses
	// latency_budget.
	SetPolicyBudget func(ctx context.Context, model, budget string) error
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
}

// NewAdmin returns the admin handler: GET /metrics, GET /status,
// GET /healthz, GET /readyz, PUT /policy (bearer token) and, when
// enabled, the live page /ui and /debug/pprof/.
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
	r.Put("/policy", func(w http.ResponseWriter, req *http.Request) {
		if !authorized(o.Token, req.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ratebatch admin"`)
			kserve.WriteError(w, http.StatusUnauthorized, "a valid bearer token is required (set admin_token)")
			return
		}
		var body struct {
			Model         string `json:"model"`
			Policy        string `json:"policy"`
			LatencyBudget string `json:"latency_budget"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil || body.Policy == "" {
			kserve.WriteError(w, http.StatusBadRequest, `want {"model": "name or empty for all", "policy": "name"}`)
			return
		}
		set := o.SetPolicy
		if body.LatencyBudget != "" {
			if body.Policy != "budget" || o.SetPolicyBudget == nil {
				kserve.WriteError(w, http.StatusBadRequest, `latency_budget applies to the budget policy: {"policy": "budget", "latency_budget": "1.10x"}`)
				return
			}
			set = func(ctx context.Context, model, _ string) error {
				return o.SetPolicyBudget(ctx, model, body.LatencyBudget)
			}
		}
		if err := set(req.Context(), body.Model, body.Policy); err != nil {
			kserve.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		model := body.Model
		if model == "" {
			model = "(all batched models)"
		}
		log.Info("policy changed by PUT /policy", "model", model, "policy", body.Policy, "remote", req.RemoteAddr)
		writeJSON(w, http.StatusOK, o.Status())
	})
	return r
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

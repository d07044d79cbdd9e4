// Package admin is the admin listener's handler, kept off the data port:
// metrics, status, health and readiness, the policy in force and its
// switch, the live page and the profiler, each behind the Host check
// against DNS rebinding and, where it changes or exposes the process, the
// bearer token.
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratebatch/ratebatch/kserve"
)

// Options configure the admin listener, kept off the data port.
type Options struct {
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
	// profiles of the live process, off by default. Like PUT /policy it
	// needs the token: a profile shows the process's memory and code
	// paths, and a CPU profile or trace of the whole process costs it.
	Pprof bool
	// Cmdline is what /debug/pprof/cmdline answers: the process's command
	// line with its secrets masked (config.RedactArgs), as net/http/pprof
	// would show os.Args; nil: not served.
	Cmdline []string
	// Hosts are the names, besides IP addresses and localhost, that a
	// request's Host may give for the admin port (admin_hosts and a name
	// in admin_listen); any other gets 421 (hostAllowed says why).
	Hosts []string
	// WhatIf, when set, answers GET /whatif: a model's recent arrivals
	// replayed through other settings (package whatif). Like /status it
	// needs no token: it shows figures, and bounds its own CPU.
	WhatIf http.Handler
	// Arrivals, when set, answers GET /arrivals behind the bearer token:
	// a model's recent arrivals as a rate series, which reveals its
	// traffic's shape.
	Arrivals http.Handler
}

// New returns the admin handler: GET /metrics, GET /status,
// GET /healthz, GET /readyz, GET /policy, PUT /policy (bearer token) and,
// when enabled, the live page /ui, /debug/pprof/, GET /whatif and
// GET /arrivals (bearer token).
//
// New stays one function: it is the route table, read whole.
func New(o Options) http.Handler {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	withToken := func(next http.Handler) http.Handler { return requireToken(o.Token, next) }
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler { return checkHost(o.Hosts, next) })
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
		r.Group(func(r chi.Router) {
			r.Use(withToken)
			r.HandleFunc("/debug/pprof/*", pprof.Index)
			r.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
				if o.Cmdline == nil {
					kserve.WriteError(w, http.StatusNotFound, "the command line is not served")
					return
				}
				// As pprof.Cmdline writes os.Args.
				w.Header().Set("X-Content-Type-Options", "nosniff")
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				io.WriteString(w, strings.Join(o.Cmdline, "\x00"))
			})
			r.HandleFunc("/debug/pprof/profile", pprof.Profile)
			r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			r.HandleFunc("/debug/pprof/trace", pprof.Trace)
		})
	}
	if o.WhatIf != nil {
		r.Method(http.MethodGet, "/whatif", o.WhatIf)
	}
	if o.Arrivals != nil {
		r.Method(http.MethodGet, "/arrivals", withToken(o.Arrivals))
	}
	if o.Policies != nil {
		r.Get("/policy", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, o.Policies())
		})
	}
	r.With(withToken).Put("/policy", func(w http.ResponseWriter, req *http.Request) {
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

// requireToken serves next only to a request with the bearer token.
func requireToken(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !authorized(token, req.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ratebatch admin"`)
			kserve.WriteError(w, http.StatusUnauthorized, "a valid bearer token is required (set admin_token)")
			return
		}
		next.ServeHTTP(w, req)
	})
}

// checkHost answers 421 to a request whose Host the admin port does not
// go by (hostAllowed), before any route sees it.
func checkHost(names []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !hostAllowed(req.Host, names) {
			kserve.WriteError(w, http.StatusMisdirectedRequest,
				fmt.Sprintf("host %q is not this admin port's: use its address, localhost, or a name in admin_hosts", req.Host))
			return
		}
		next.ServeHTTP(w, req)
	})
}

// hostAllowed reports whether host, a request's Host, names the admin
// port: an IP address, localhost (or a name under .localhost, which
// resolves to loopback only), one of names, or none at all (HTTP/1.0).
// This is the defence against DNS rebinding: a page at evil.example whose
// name the attacker points at 127.0.0.1 reaches the admin port from the
// victim's browser with Host evil.example. An address is never such a
// name, so clients that dial by address (Prometheus scraping pod IPs,
// the kubelet's probes) need no configuration; a name they dial by (a
// Service, a compose service name) goes in admin_hosts.
func hostAllowed(host string, names []string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	switch {
	case host == "":
		return true
	case isAddr(host):
		return true
	case strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost"):
		return true
	}
	for _, n := range names {
		if strings.EqualFold(host, strings.TrimSuffix(n, ".")) {
			return true
		}
	}
	return false
}

func isAddr(host string) bool {
	_, err := netip.ParseAddr(host) // with an IPv6 zone too
	return err == nil
}

// authorized compares the bearer token in constant time. The header is
// read as RFC 6750 says: the scheme in any case (an HTTP auth-scheme is
// case-insensitive, RFC 9110), one or more spaces, the token.
func authorized(token, header string) bool {
	scheme, got, ok := strings.Cut(header, " ")
	if token == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got = strings.TrimLeft(got, " ")
	return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Package config owns the schema of ratebatch serve's configuration: defaults,
// the YAML file, RATEBATCH_* environment variables and command-line flags, in
// that order of precedence, and validation whose messages name the field.
//
// Every scalar option is declared once, as a struct field with a yaml tag and
// a help tag; the environment variable, the flag and the reference in
// docs/CONFIG.md are all derived from that declaration, so they cannot drift.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/internal/redact"
	"github.com/ratebatch/ratebatch/internal/suggest"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/power"
	"github.com/ratebatch/ratebatch/whatif"
)

// Config is the whole configuration of `ratebatch serve`.
type Config struct {
	Upstream    string `yaml:"upstream" help:"Triton's HTTP base URL, e.g. http://127.0.0.1:8000 (required)"`
	Listen      string `yaml:"listen" help:"data address: serves Triton's HTTP API to clients"`
	AdminListen string `yaml:"admin_listen" help:"admin address: /metrics, /status, policy changes; keep it private"`
	GRPCListen  string `yaml:"grpc_listen" help:"gRPC address: serves Triton's gRPC API (inference.GRPCInferenceService) to clients; empty: off"`
	// UpstreamGRPC is where gRPC calls are relayed; see UpstreamGRPCAddr.
	UpstreamGRPC string `yaml:"upstream_grpc" help:"Triton's gRPC HOST:PORT for relayed gRPC calls (default: the upstream's host, port 8001)"`
	// AdminToken guards mutating admin calls. It is never logged.
	AdminToken string `yaml:"admin_token" help:"bearer token required by PUT /policy, GET /arrivals and the profiler on the admin address (empty: they are refused); give it in the environment or the file: a flag is readable by any local user (ps)" secret:"true"`
	AdminPprof bool   `yaml:"admin_pprof" help:"serve Go's profiler at /debug/pprof/ on the admin address (for profiling under load); it needs the admin token, as PUT /policy does"`
	// AdminHosts are the names the admin port answers to besides
	// addresses and localhost (admin.Options.Hosts).
	AdminHosts string `yaml:"admin_hosts" help:"names, comma-separated, by which clients reach the admin address besides IP addresses and localhost (a compose service, a Kubernetes Service); a request whose Host is another name gets 421, so a web page cannot reach the admin port by DNS rebinding"`

	// The headers that decide who may call, forwarded on batched calls
	// (door.Forwarding), and the proxy's own calls' headers.
	ForwardHeaders       string `yaml:"forward_headers" help:"comma-separated header names that decide who may call, besides Authorization (always): on a batched call they reach Triton, and callers with different values never share a batch (gRPC: the same names in the call's metadata)"`
	ForwardHeaderPattern string `yaml:"forward_header_pattern" help:"regular expression: headers whose names match are forwarded as forward_headers are, as Triton's --http-header-forward-pattern and --grpc-header-forward-pattern forward them to the backend (matched without regard to case; empty: none)"`
	// UpstreamHeaders are set on the proxy's own calls to Triton; YAML only.
	UpstreamHeaders map[string]string `yaml:"upstream_headers" noflag:"true"`
	// RestrictedAPI is which of Triton's routes clients may reach through
	// the doors (package door); its header values are secrets.
	RestrictedAPI RestrictedAPI `yaml:"restricted_api" help:"Triton's API categories closed to clients, or open only to a header, at both doors, as Triton's --http-restricted-api: entries CATEGORY[,CATEGORY...]:KEY=VALUE (open to calls with header KEY: VALUE; gRPC metadata triton-grpc-protocol-KEY) or CATEGORY[,CATEGORY...] (closed), joined by ';' in a flag; categories health, metadata, inference, shared-memory, model-config, model-repository, statistics, trace, logging (empty: all open, as Triton); each KEY is also forwarded on batched calls, as forward_headers are, so a Triton that restricts the category itself accepts them"`

	Policy    Policy       `yaml:"policy"`
	Limits    Limits       `yaml:"limits"`
	Upstreams UpstreamOpts `yaml:"upstream_client"`
	Power     Power        `yaml:"power"`
	ORCA      ORCA         `yaml:"orca"`
	Log       Log          `yaml:"log"`
	Tracing   Tracing      `yaml:"tracing"`
	WhatIf    WhatIf       `yaml:"whatif"`
	// TLS of the doors and the upstream (package server's tls.go).
	TLS         TLS           `yaml:"tls"`
	UpstreamTLS UpstreamTLS   `yaml:"upstream_tls"`
	Discovery   time.Duration `yaml:"discovery_interval" help:"how often the upstream's models and their configurations are re-read, and each model's mode (batched or passed through) decided again (0: only at start, and on a repository load or unload through the proxy)"`
	Grace       time.Duration `yaml:"shutdown_grace" help:"on SIGTERM, time allowed to drain queues and in-flight batches"`
	// Procs is GOMAXPROCS; 0 sizes it to the load (package internal/procs).
	Procs int `yaml:"procs" help:"Go processors (GOMAXPROCS) (0: as few as the proxy's CPU use needs, up to the runtime's default; GOMAXPROCS in the environment fixes them instead)"`

	// Models holds per-model overrides; YAML only.
	Models map[string]Model `yaml:"models" noflag:"true"`
}

// Policy selects and tunes the batching policy applied to every model that
// has no override.
type Policy struct {
	Name   string        `yaml:"name" flag:"policy" help:"batching policy: {policies}, or passthrough (no batching)"`
	Window time.Duration `yaml:"window" help:"monitor window: arrivals are counted and the rule re-planned once per window"`
	// Options are the registered policies' own parameters (policy.w1,
	// policy.sla, ...), declared, documented, validated and registered by
	// package policy, each policy's beside it; their keys are this
	// section's.
	Options     policy.Options `yaml:",inline"`
	MaxInFlight int            `yaml:"max_in_flight" help:"batches in flight per model (0: the model's instance count)"`
}

// Limits bounds what one client or one burst can cost.
type Limits struct {
	MaxBodyBytes      Bytes         `yaml:"max_body_bytes" help:"largest request body accepted (e.g. 64MiB)"`
	QueueRows         int           `yaml:"queue_rows" help:"rows waiting per model before new requests get 503"`
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout" help:"time allowed to read request headers (slow-loris bound)"`
	ReadTimeout       time.Duration `yaml:"read_timeout" help:"time allowed to read a request's body once its headers are in"`
	WriteTimeout      time.Duration `yaml:"write_timeout" help:"time allowed to write a response; an answer streamed without a length (generate_stream's server-sent events) is bounded per write instead, so a stream its client keeps reading is never cut"`
	// UpstreamIdle bounds the upstream's silence in a pass-through exchange.
	UpstreamIdle      time.Duration `yaml:"upstream_idle_timeout" help:"longest the upstream may send nothing in a pass-through exchange: before its answer begins (504) or between two parts of a streamed answer (the stream ends); an upstream that keeps sending is never cut (0: none, as Triton sets none)"`
	IdleTimeout       time.Duration `yaml:"idle_timeout" help:"connections idle longer than this are closed: HTTP keep-alive connections between requests, gRPC connections without a call"`
	RetryAfter        time.Duration `yaml:"retry_after" help:"Retry-After sent with 503 on overload"`
	MaxConnections    int           `yaml:"max_connections" help:"connections the data ports hold open, HTTP and gRPC together; one more is answered 503 with Retry-After (gRPC: its calls RESOURCE_EXHAUSTED) and closed (0: no bound)"`
	MaxConnsPerClient int           `yaml:"max_connections_per_client" help:"connections one client address holds open on the data ports (0: no bound; clients behind one balancer or NAT share an address)"`
	GRPCMaxStreams    int           `yaml:"grpc_max_streams" help:"calls one gRPC connection runs at once (HTTP/2 concurrent streams; also bounds a rapid-reset flood)"`
	Memory            Bytes         `yaml:"memory" help:"memory budget of request bodies being read, queued and in flight and of answers being written, over both doors; a request that would pass it gets 503 (gRPC RESOURCE_EXHAUSTED) before its body is read further (0: half the cgroup memory limit, else 1GiB)"`
}

// UpstreamOpts tunes the pooled client to Triton.
type UpstreamOpts struct {
	Timeout  time.Duration `yaml:"timeout" flag:"upstream-timeout" help:"deadline of a batch's upstream call when one of its callers has no deadline of its own (an HTTP caller; a gRPC caller's deadline bounds its own): past it the batch fails with 504 to each caller (0: none, as Triton sets none)"`
	MaxConns int           `yaml:"max_conns" flag:"upstream-max-conns" help:"connections kept to the upstream"`
	Retries  int           `yaml:"retries" flag:"upstream-retries" help:"retries of a batch after a connection error"`
	Hold     time.Duration `yaml:"hold" flag:"upstream-hold" help:"longest a request waits, from its arrival, for an upstream that refuses connections to come back before it gets 503 (a shorter timeout in the model's queue wins; 0: no hold)"`
	// Passive outlier detection (dispatcher.Outlier).
	FailingAfter  int           `yaml:"failing_after" flag:"upstream-failing-after" help:"batches in a row failing with a server error (upstream 502, 503, 504, timeout, malformed answer) that mark a model failing: not ready, callers 503, one probe batch at a time; as many in a row answered only with Triton's 500 send the probe inference, whose failure marks it (0: off)"`
	HungFactor    float64       `yaml:"hung_factor" flag:"upstream-hung-factor" help:"a batch running longer than this many times its predicted tau(b), and at least hung_min, marks its model failing at once (0: off)"`
	HungMin       time.Duration `yaml:"hung_min" flag:"upstream-hung-min" help:"shortest run of a batch taken for hung (see hung_factor)"`
	ProbeInterval time.Duration `yaml:"probe_interval" flag:"upstream-probe-interval" help:"longest pause between probes of a failing model or of an upstream refusing connections: the proxy sends its own probe inference, the first within half a second, then at growing jittered pauses up to this"`
	// Active health check (dispatcher.HealthCheck).
	HealthCheckInterval time.Duration `yaml:"health_check_interval" flag:"upstream-health-check-interval" help:"how often the upstream's readiness (/v2/health/ready) and each batched model's (/v2/models/M/ready) are read, traffic or not; each read times out after the same time: a refused, failed or unanswered check turns /readyz within two intervals (0: off)"`
}

// Power selects where energy figures come from.
type Power struct {
	Source     string        `yaml:"source" help:"energy source: auto (triton when power.metrics_url is set or the upstream is on Triton's port 8000, else none), {power_sources}"`
	Interval   time.Duration `yaml:"interval" help:"power sampling interval"`
	MetricsURL string        `yaml:"metrics_url" help:"triton source: Triton's metrics URL (default: upstream host, port 8002, /metrics)"`
	GPUs       string        `yaml:"gpus" help:"nvml source: comma-separated GPU indices (empty: all)"`
}

// ORCA configures the load reports for balancers that do not read the
// endpoint-load-metrics header (package orca; docs/SCALING.md).
type ORCA struct {
	HAProxyAgentListen  string  `yaml:"haproxy_agent_listen" flag:"haproxy-agent-listen" help:"address answering HAProxy's agent-check with the replica's weight, its capacity as a percentage of orca.haproxy_agent_full_rps; empty: off"`
	HAProxyAgentFullRPS float64 `yaml:"haproxy_agent_full_rps" flag:"haproxy-agent-full-rps" help:"capacity in rows/s answered as 100% to HAProxy's agent-check (e.g. the fastest replica's); required with orca.haproxy_agent_listen"`
}

// Log configures log/slog.
type Log struct {
	Level  string `yaml:"level" help:"debug, info, warn or error"`
	Format string `yaml:"format" help:"text or json"`
}

// Tracing turns on OpenTelemetry traces (package tracing). The SDK's own
// OTEL_* variables apply too: OTEL_EXPORTER_OTLP_ENDPOINT when the endpoint
// is empty, OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_TRACES_SAMPLER and _ARG.
type Tracing struct {
	OTLPEndpoint string `yaml:"otlp_endpoint" help:"OTLP receiver's base URL for traces, e.g. http://localhost:4318 (empty: OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing); sampling from OTEL_TRACES_SAMPLER, parent-based by default"`
}

// WhatIf keeps each model's recent arrivals, for GET /arrivals and the
// what-if that replays them through other settings (package whatif,
// docs/WHATIF.md). Its memory is at most whatif.models times, per model,
// 24 bytes an arrival kept, a batch's 32 bytes for every 8 arrivals and
// 112 bytes a second of whatif.max_minutes (whatif.Options.Bytes).
type WhatIf struct {
	Arrivals    int     `yaml:"arrivals" help:"arrivals (and their answers) each model keeps for GET /arrivals and GET /whatif, 28 bytes each with a batch's share (0: keep none, no what-if)"`
	Models      int     `yaml:"models" help:"models whose arrivals are kept: the first ones to receive calls"`
	MaxMinutes  int     `yaml:"max_minutes" help:"longest window, in minutes, GET /arrivals and GET /whatif cover"`
	CPU         float64 `yaml:"cpu" help:"share of one core a what-if may take while it replays (one runs at a time)"`
	MinArrivals int     `yaml:"min_arrivals" help:"fewest calls in the window a what-if answers on (fewer: it says there is too little traffic)"`
}

// Model overrides the defaults for one model.
type Model struct {
	// Policy overrides policy.name for this model; "passthrough" disables batching.
	Policy string `yaml:"policy"`
	// ProfileCSV seeds the latency regression (columns batch_size,latency_ms).
	ProfileCSV string `yaml:"profile_csv"`
	// MaxBatchSize caps batches below the upstream's max_batch_size (0: upstream's).
	MaxBatchSize int `yaml:"max_batch_size"`
	// SLA overrides policy.sla for this model.
	SLA time.Duration `yaml:"sla"`
	// LatencyBudget overrides policy.latency_budget for this model.
	LatencyBudget string `yaml:"latency_budget"`
	// Probe is the KServe v2 JSON request the proxy sends on its own to
	// test the model while it fails; empty: one row of zeros made up from
	// the model's configuration.
	Probe string `yaml:"probe"`
	// BatchCached batches the model although Triton's response cache is
	// on for it: a merged request has its own cache key, so the callers'
	// repeated requests miss the cache (the default passes them through).
	BatchCached bool `yaml:"batch_cached"`
}

// Default returns the configuration used where nothing else is said.
func Default() Config {
	return Config{
		Listen:      ":9000",
		AdminListen: "127.0.0.1:9002",
		Policy: Policy{
			Name:   "budget",
			Window: time.Second,
			Options: policy.NewOptions(
				policy.MaxBatchOptions{MaxQueueDelay: 5 * time.Millisecond},
				policy.SMDPOptions{W1: 1},
			),
		},
		Limits: Limits{
			MaxBodyBytes:      64 << 20,
			QueueRows:         4096,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       60 * time.Second,
			WriteTimeout:      120 * time.Second,
			UpstreamIdle:      120 * time.Second,
			IdleTimeout:       120 * time.Second,
			RetryAfter:        time.Second,
			MaxConnections:    4096,
			GRPCMaxStreams:    1024,
		},
		Upstreams: UpstreamOpts{MaxConns: 256, Retries: 1, Hold: 5 * time.Second,
			FailingAfter: 5, HungFactor: 10, HungMin: 2 * time.Second, ProbeInterval: time.Second, HealthCheckInterval: time.Second},
		Power: Power{Source: PowerAuto, Interval: 100 * time.Millisecond},
		WhatIf: WhatIf{Arrivals: whatif.DefaultArrivals, Models: whatif.DefaultModels, MaxMinutes: whatif.DefaultMaxMinutes,
			CPU: whatif.DefaultCPU, MinArrivals: whatif.DefaultMinArrivals},
		Log:       Log{Level: "info", Format: "text"},
		Discovery: 30 * time.Second,
		Grace:     30 * time.Second,
	}
}

// Passthrough is the policy name that turns batching off for a model.
const Passthrough = "passthrough"

// Policies lists the policy names the config accepts: every policy the
// policy package registers, and passthrough. The policy package owns their
// meaning; config only refuses typos early.
func Policies() []string { return append(policy.Names(), Passthrough) }

// Validate reports every unusable field, each by its YAML path, joined
// (errors.Join) in the order of the configuration's sections: a user fixing
// a file sees all its mistakes at once, not one per start.
func (c *Config) Validate() error {
	return errors.Join(
		errors.Join(c.validAddresses()...),
		c.validPolicy(),
		errors.Join(c.validBounds()...),
		c.validPower(),
		c.validTLS(),
		c.validHeaders(),
		oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error"),
		oneOf("log.format", c.Log.Format, "text", "json"),
		errors.Join(c.validModels()...),
	)
}

// validAddresses checks where the process listens and what it reaches:
// the upstream, the three ports, the admin port's host names, the ORCA
// agent, the tracing endpoint, Triton's gRPC port and restricted_api.
func (c *Config) validAddresses() []error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if c.Upstream == "" {
		add(fieldErr("upstream", "is required (Triton's HTTP URL, e.g. http://127.0.0.1:8000)"))
	} else if u, err := url.Parse(c.Upstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		add(fieldErr("upstream", "must be an http(s) URL with a host, got %q", redact.URL(c.Upstream)))
	}
	if c.Listen == "" {
		add(fieldErr("listen", "is required"))
	}
	if c.AdminListen == "" {
		add(fieldErr("admin_listen", "is required"))
	} else if c.AdminListen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
		add(fieldErr("admin_listen", "must differ from listen (%q): admin calls stay off the data port", c.Listen))
	}
	for _, h := range c.AdminHostNames() {
		if h == "" || strings.ContainsAny(h, ":/@ ") {
			add(fieldErr("admin_hosts", "must be host names separated by commas, got %q", c.AdminHosts))
			break
		}
	}
	if c.GRPCListen != "" && (c.GRPCListen == c.Listen || c.GRPCListen == c.AdminListen) && !strings.HasSuffix(c.GRPCListen, ":0") {
		add(fieldErr("grpc_listen", "must differ from listen and admin_listen, got %q", c.GRPCListen))
	}
	if c.ORCA.HAProxyAgentListen != "" && !(c.ORCA.HAProxyAgentFullRPS > 0 && c.ORCA.HAProxyAgentFullRPS < 1e15) {
		add(fieldErr("orca.haproxy_agent_full_rps", "must be > 0 rows/s with orca.haproxy_agent_listen (the capacity answered as 100%%), got %v", c.ORCA.HAProxyAgentFullRPS))
	}
	if e := c.Tracing.OTLPEndpoint; e != "" {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add(fieldErr("tracing.otlp_endpoint", "must be an http(s) URL with a host, e.g. http://localhost:4318, got %q", redact.URL(e)))
		}
	}
	if c.UpstreamGRPC != "" {
		if host, port, err := net.SplitHostPort(c.UpstreamGRPC); err != nil || host == "" || port == "" {
			add(fieldErr("upstream_grpc", "must be HOST:PORT, got %q", c.UpstreamGRPC))
		}
	}
	if _, err := c.RestrictedAPI.Rules(); err != nil {
		add(fieldErr("restricted_api", "%v", err))
	}
	return errs
}

// validPolicy checks the policy section's name and options.
func (c *Config) validPolicy() error {
	return errors.Join(validPolicyName("policy.name", c.Policy.Name), validOptions("policy.", c.Policy.Options))
}

// validBounds checks the numbers and durations that have a least value,
// a table of them in the order of their sections.
func (c *Config) validBounds() []error {
	checks := []struct {
		field string
		bad   bool
		msg   string
	}{
		{"policy.window", c.Policy.Window <= 0, "must be > 0"},
		{"policy.max_in_flight", c.Policy.MaxInFlight < 0, "must be >= 0"},
		{"limits.max_body_bytes", c.Limits.MaxBodyBytes <= 0, "must be > 0"},
		{"limits.queue_rows", c.Limits.QueueRows <= 0, "must be > 0"},
		{"limits.read_header_timeout", c.Limits.ReadHeaderTimeout <= 0, "must be > 0"},
		{"limits.read_timeout", c.Limits.ReadTimeout < 0, "must be >= 0"},
		{"limits.write_timeout", c.Limits.WriteTimeout < 0, "must be >= 0"},
		{"limits.upstream_idle_timeout", c.Limits.UpstreamIdle < 0, "must be >= 0"},
		{"limits.idle_timeout", c.Limits.IdleTimeout < 0, "must be >= 0"},
		{"limits.retry_after", c.Limits.RetryAfter < 0, "must be >= 0"},
		{"limits.memory", c.Limits.Memory < 0, "must be >= 0"},
		{"limits.max_connections", c.Limits.MaxConnections < 0, "must be >= 0"},
		{"limits.max_connections_per_client", c.Limits.MaxConnsPerClient < 0, "must be >= 0"},
		{"limits.grpc_max_streams", c.Limits.GRPCMaxStreams <= 0 || c.Limits.GRPCMaxStreams > 1<<31-1, "must be > 0"},
		{"upstream_client.timeout", c.Upstreams.Timeout < 0, "must be >= 0"},
		{"upstream_client.max_conns", c.Upstreams.MaxConns <= 0, "must be > 0"},
		{"upstream_client.retries", c.Upstreams.Retries < 0, "must be >= 0"},
		{"upstream_client.hold", c.Upstreams.Hold < 0, "must be >= 0"},
		{"upstream_client.failing_after", c.Upstreams.FailingAfter < 0, "must be >= 0"},
		{"upstream_client.hung_factor", c.Upstreams.HungFactor < 0, "must be >= 0"},
		{"upstream_client.hung_min", c.Upstreams.HungMin < 0, "must be >= 0"},
		{"upstream_client.probe_interval", c.Upstreams.ProbeInterval < 0, "must be >= 0"},
		{"upstream_client.health_check_interval", c.Upstreams.HealthCheckInterval < 0, "must be >= 0"},
		{"power.interval", c.Power.Interval <= 0, "must be > 0"},
		{"discovery_interval", c.Discovery < 0, "must be >= 0"},
		{"shutdown_grace", c.Grace < 0, "must be >= 0"},
		{"procs", c.Procs < 0, "must be >= 0"},
		{"whatif.arrivals", c.WhatIf.Arrivals < 0, "must be >= 0"},
		{"whatif.models", c.WhatIf.Models < 1, "must be >= 1"},
		{"whatif.max_minutes", c.WhatIf.MaxMinutes < 1, "must be >= 1"},
		{"whatif.cpu", !(c.WhatIf.CPU > 0 && c.WhatIf.CPU <= 1), "must be > 0 and at most 1 (a share of one core)"},
		{"whatif.min_arrivals", c.WhatIf.MinArrivals < 1, "must be >= 1"},
	}
	var errs []error
	for _, ch := range checks {
		if ch.bad {
			errs = append(errs, fieldErr(ch.field, "%s", ch.msg))
		}
	}
	return errs
}

// validPower checks the power section: its source and metrics URL.
func (c *Config) validPower() error {
	err := validPowerSource(c.Power.Source)
	if c.Power.MetricsURL != "" {
		if u, perr := url.Parse(c.Power.MetricsURL); perr != nil || u.Host == "" {
			err = errors.Join(err, fieldErr("power.metrics_url", "must be a URL with a host, got %q", redact.URL(c.Power.MetricsURL)))
		}
	}
	return err
}

// validModels checks each model's overrides, in the order of their names.
func (c *Config) validModels() []error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Models)) {
		m, path := c.Models[name], "models."+name
		if m.Policy != "" {
			add(validPolicyName(path+".policy", m.Policy))
		}
		if m.MaxBatchSize < 0 {
			add(fieldErr(path+".max_batch_size", "must be >= 0"))
		}
		if m.SLA < 0 {
			add(fieldErr(path+".sla", "must be >= 0"))
		}
		add(validOptions(path+".", policy.BudgetOptions{LatencyBudget: m.LatencyBudget}))
		if m.Probe != "" {
			add(validProbe(path+".probe", m.Probe))
		}
	}
	return errs
}

// ForwardNames are the header names forwarded on batched calls besides
// Authorization: forward_headers'.
func (c *Config) ForwardNames() []string {
	var out []string
	for _, n := range strings.Split(c.ForwardHeaders, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// RestrictedKeys are the KEY of each restricted_api value: the header an
// HTTP client sends, "triton-grpc-protocol-KEY" the metadata a gRPC
// client sends (door.NewForwarding).
func (c *Config) RestrictedKeys() []string {
	var out []string
	for _, spec := range c.RestrictedAPI {
		if key, ok := restrictedKey(spec); ok {
			out = append(out, key)
		}
	}
	return out
}

// restrictedKey is the KEY of a restricted_api entry
// CATEGORIES:KEY=VALUE; ok is false for an entry that closes its
// categories (no header opens them).
func restrictedKey(spec string) (key string, ok bool) {
	_, kv, found := strings.Cut(strings.TrimSpace(spec), ":")
	if !found {
		return "", false
	}
	key, _, _ = strings.Cut(kv, "=")
	key = strings.TrimSpace(key)
	return key, key != ""
}

// validHeaders checks the forwarded and upstream headers' options.
func (c *Config) validHeaders() error {
	var errs []error
	for _, n := range strings.Split(c.ForwardHeaders, ",") {
		if n = strings.TrimSpace(n); n != "" && !isToken(n) {
			errs = append(errs, fieldErr("forward_headers", "%q is not a header name", n))
		}
	}
	if c.ForwardHeaderPattern != "" {
		if _, err := regexp.Compile(c.ForwardHeaderPattern); err != nil {
			errs = append(errs, fieldErr("forward_header_pattern", "%v", err))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(c.UpstreamHeaders)) {
		if !isToken(n) {
			errs = append(errs, fieldErr("upstream_headers", "%q is not a header name", n))
		}
	}
	return errors.Join(errs...)
}

// isToken reports whether s is an HTTP token (RFC 9110 5.6.2), as header
// names are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", c) {
			return false
		}
	}
	return true
}

// UpstreamHeaderValues are upstream_headers with ${NAME} in each value
// replaced by the environment variable NAME (a secret kept out of the
// file), as lookup finds it.
func (c *Config) UpstreamHeaderValues(lookup func(string) (string, bool)) map[string]string {
	out := make(map[string]string, len(c.UpstreamHeaders))
	for k, v := range c.UpstreamHeaders {
		out[k] = os.Expand(v, func(name string) string { s, _ := lookup(name); return s })
	}
	return out
}

// UpstreamGRPCAddr is Triton's gRPC address: upstream_grpc, or by default
// the upstream's host with Triton's gRPC port, 8001.
func (c *Config) UpstreamGRPCAddr() string {
	if c.UpstreamGRPC != "" {
		return c.UpstreamGRPC
	}
	return c.upstreamHostPort("8001")
}

// upstreamHostPort is the upstream's host with another of Triton's ports
// (an IPv6 host keeps its brackets); "" when upstream is no URL.
func (c *Config) upstreamHostPort(port string) string {
	u, err := url.Parse(c.Upstream)
	if err != nil || u.Hostname() == "" {
		return ""
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// validOptions validates policy options (package policy owns their bounds)
// and names the field at fault under prefix.
func validOptions(prefix string, o interface{ Validate() error }) error {
	err := o.Validate()
	var pe *policy.ParamError
	if errors.As(err, &pe) {
		return fieldErr(prefix+pe.Param, "%s", pe.Msg)
	}
	return err
}

// AdminHostNames are the names the admin port answers to besides IP
// addresses and localhost: admin_hosts, and the host of admin_listen when
// it is a name.
func (c *Config) AdminHostNames() []string {
	var names []string
	if c.AdminHosts != "" {
		for _, h := range strings.Split(c.AdminHosts, ",") {
			names = append(names, strings.TrimSpace(h))
		}
	}
	if host, _, err := net.SplitHostPort(c.AdminListen); err == nil && host != "" && net.ParseIP(host) == nil {
		names = append(names, host)
	}
	return names
}

// MetricsURL is Triton's Prometheus metrics URL for the triton energy
// source: power.metrics_url, or by default the upstream's host with
// Triton's metrics port, http://HOST:8002/metrics (an IPv6 host keeps its
// brackets).
func (c *Config) MetricsURL() string {
	if c.Power.MetricsURL != "" {
		return c.Power.MetricsURL
	}
	if hp := c.upstreamHostPort("8002"); hp != "" {
		return "http://" + hp + "/metrics"
	}
	return ""
}

// PowerAuto is the default power.source: Triton's metrics where they are
// known to be, else none (Config.PowerSource).
const PowerAuto = "auto"

// PowerSources lists what power.source accepts: auto, and every energy
// source package power registers (power.RegisterKind).
func PowerSources() []string { return append([]string{PowerAuto}, power.KindNames()...) }

// validPowerSource refuses a power.source that names no registered
// energy source, with the nearest one it may mean, or one this build
// leaves out, with why (nvml without cgo).
func validPowerSource(kind string) error {
	if kind == PowerAuto {
		return nil
	}
	_, err := power.LookupKind(kind)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, power.ErrUnknownKind):
		return fieldErr("power.source", "%v", err)
	}
	known := PowerSources()
	if near := suggest.Closest(kind, known); near != "" {
		return fieldErr("power.source", "unknown energy source %q; did you mean %s? (known: %s)", kind, near, strings.Join(known, ", "))
	}
	return fieldErr("power.source", "unknown energy source %q (known: %s)", kind, strings.Join(known, ", "))
}

// PowerSource is the energy source to open and, for triton, the metrics
// URL it reads. It resolves auto: Triton's metrics when power.metrics_url
// is set, or when the upstream is on Triton's HTTP port 8000, so that its
// metrics port 8002 beside it is Triton's (as Triton and the emulator
// serve them by default); otherwise none, rather than read a port 8002
// that may be anyone's.
func (c *Config) PowerSource() (kind, metricsURL string) {
	switch c.Power.Source {
	case power.KindTriton:
		return power.KindTriton, c.MetricsURL()
	case PowerAuto:
		if u, err := url.Parse(c.Upstream); c.Power.MetricsURL == "" && (err != nil || u.Port() != "8000") {
			return power.KindNone, ""
		}
		return power.KindTriton, c.MetricsURL()
	}
	return c.Power.Source, c.Power.MetricsURL
}

// ModelPolicy returns the policy name that applies to a model.
func (c *Config) ModelPolicy(model string) string {
	if m, ok := c.Models[model]; ok && m.Policy != "" {
		return m.Policy
	}
	return c.Policy.Name
}

func validPolicyName(field, name string) error {
	return oneOf(field, name, Policies()...)
}

func oneOf(field, got string, allowed ...string) error {
	for _, a := range allowed {
		if got == a {
			return nil
		}
	}
	return fieldErr(field, "must be one of %s, got %q", strings.Join(allowed, ", "), got)
}

// FieldError names the configuration field that is wrong and, when it came
// from a file, the file and line.
type FieldError struct {
	Field string
	Msg   string
	File  string // empty unless the value came from a YAML file
	Line  int    // 0 unless the value came from a YAML file
}

func (e *FieldError) Error() string {
	where := ""
	switch {
	case e.File != "" && e.Line > 0:
		where = fmt.Sprintf("%s line %d: ", e.File, e.Line)
	case e.Line > 0:
		where = fmt.Sprintf("line %d: ", e.Line)
	}
	return "config: " + where + e.Field + ": " + e.Msg
}

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// CheckProbe checks a probe request (models.NAME.probe): a KServe v2 JSON
// request body with at least one input.
func CheckProbe(body string) error {
	var req struct {
		Inputs []json.RawMessage `json:"inputs"`
	}
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		return fmt.Errorf("not a KServe v2 JSON request: %w", err)
	}
	if len(req.Inputs) == 0 {
		return errors.New("not a KServe v2 JSON request: no inputs")
	}
	return nil
}

func validProbe(field, body string) error {
	if err := CheckProbe(body); err != nil {
		return fieldErr(field, "%v", err)
	}
	return nil
}

package config

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/power"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ratebatch.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func flags(t *testing.T, args ...string) *flag.FlagSet {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return fs
}

func TestPrecedenceFileEnvFlags(t *testing.T) {
	file := writeFile(t, `
upstream: http://file:8000
listen: ":7000"
policy:
  name: adhoc
  window: 2s
limits:
  max_body_bytes: 1MiB
models:
  resnet:
    policy: maxbatch
    max_batch_size: 16
`)
	tests := []struct {
		name  string
		env   map[string]string
		args  []string
		check func(t *testing.T, c *Config)
	}{
		{"file over defaults", nil, nil, func(t *testing.T, c *Config) {
			if c.Upstream != "http://file:8000" || c.Listen != ":7000" || c.Policy.Name != "adhoc" || c.Policy.Window != 2*time.Second {
				t.Fatalf("file values not applied: %+v", c)
			}
			if c.Limits.MaxBodyBytes != 1<<20 {
				t.Fatalf("max_body_bytes = %v", c.Limits.MaxBodyBytes)
			}
			if c.Limits.QueueRows != Default().Limits.QueueRows {
				t.Fatalf("unset field lost its default: %d", c.Limits.QueueRows)
			}
			if c.ModelPolicy("resnet") != "maxbatch" || c.ModelPolicy("other") != "adhoc" {
				t.Fatalf("model policy override wrong")
			}
		}},
		{"env over file", map[string]string{"RATEBATCH_POLICY_NAME": "static", "RATEBATCH_POLICY_WINDOW": "500ms"}, nil, func(t *testing.T, c *Config) {
			if c.Policy.Name != "static" || c.Policy.Window != 500*time.Millisecond {
				t.Fatalf("env not applied: %+v", c.Policy)
			}
		}},
		{"flags over env", map[string]string{"RATEBATCH_POLICY_NAME": "static"}, []string{"-policy", "smdp", "-upstream", "http://flag:1"}, func(t *testing.T, c *Config) {
			if c.Policy.Name != "smdp" || c.Upstream != "http://flag:1" {
				t.Fatalf("flags not applied: %s %s", c.Policy.Name, c.Upstream)
			}
			if c.Listen != ":7000" {
				t.Fatalf("an unset flag overrode the file: listen %q", c.Listen)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(Source{File: file, LookupEnv: env(tt.env), Flags: flags(t, tt.args...)})
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestBadConfigNamesField(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		env   map[string]string
		field string
	}{
		{"missing upstream", "listen: ':1'", nil, "upstream"},
		{"bad upstream", "upstream: ftp://x", nil, "upstream"},
		{"unknown policy", "upstream: http://u\npolicy: {name: fastest}", nil, "policy.name"},
		{"zero window", "upstream: http://u\npolicy: {window: 0s}", nil, "policy.window"},
		{"same ports", "upstream: http://u\nlisten: ':1'\nadmin_listen: ':1'", nil, "admin_listen"},
		{"bad power source", "upstream: http://u\npower: {source: solar}", nil, "power.source"},
		{"bad model policy", "upstream: http://u\nmodels: {m: {policy: x}}", nil, "models.m.policy"},
		{"bad env duration", "upstream: http://u", map[string]string{"RATEBATCH_LIMITS_READ_TIMEOUT": "soon"}, "limits.read_timeout"},
		{"smdp without latency weight", "upstream: http://u\npolicy: {name: smdp, w1: 0, w2: 1}", nil, "policy.w1"},
		{"negative queue", "upstream: http://u\nlimits: {queue_rows: -1}", nil, "limits.queue_rows"},
		{"negative sla", "upstream: http://u\npolicy: {sla: -1s}", nil, "policy.sla"},
		{"negative procs from env", "upstream: http://u", map[string]string{"RATEBATCH_PROCS": "-2"}, "procs"},
		{"negative row cap from env", "upstream: http://u", map[string]string{"RATEBATCH_POLICY_ROW_CAP": "-1"}, "policy.row_cap"},
		{"negative wait bound", "upstream: http://u\npolicy: {wait_bound: -1ms}", nil, "policy.wait_bound"},
		{"latency budget below ad-hoc", "upstream: http://u\npolicy: {name: budget, latency_budget: 0.9x}", nil, "policy.latency_budget"},
		{"haproxy agent without full capacity", "upstream: http://u\norca: {haproxy_agent_listen: ':7'}", nil, "orca.haproxy_agent_full_rps"},
		{"haproxy agent with negative full capacity from env", "upstream: http://u", map[string]string{"RATEBATCH_ORCA_HAPROXY_AGENT_LISTEN": ":7", "RATEBATCH_ORCA_HAPROXY_AGENT_FULL_RPS": "-1"}, "orca.haproxy_agent_full_rps"},
		{"bad model latency budget", "upstream: http://u\nmodels: {m: {latency_budget: soon}}", nil, "models.m.latency_budget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(Source{File: writeFile(t, tt.yaml), LookupEnv: env(tt.env)})
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a FieldError", err)
			}
			if fe.Field != tt.field {
				t.Fatalf("field = %q, want %q (err %v)", fe.Field, tt.field, err)
			}
		})
	}
}

// Validate reports every unusable field at once, whichever sections they
// are in: a user fixing a file sees all its mistakes, not one per start.
func TestValidateReportsEveryField(t *testing.T) {
	_, err := Load(Source{File: writeFile(t, "upstream: ftp://x\norca: {haproxy_agent_listen: ':7'}\nlimits: {queue_rows: -1}\nlog: {level: loud}\n")})
	if err == nil {
		t.Fatal("a configuration with four mistakes was accepted")
	}
	for _, field := range []string{"upstream", "orca.haproxy_agent_full_rps", "limits.queue_rows", "log.level"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("the error does not name %s: %v", field, err)
		}
	}
}

func TestUnknownYAMLKeyRefused(t *testing.T) {
	_, err := Load(Source{File: writeFile(t, "upstream: http://u\npolicy:\n  windw: 1s\n")})
	if err == nil || !strings.Contains(err.Error(), "windw") {
		t.Fatalf("err = %v, want it to name the unknown key", err)
	}
}

// The policies' parameters are package policy's typed Options: the file,
// the environment and the flags fill them under their usual keys, and the
// Go-only ones are no configuration keys.
func TestPolicyOptionsFilledDirectly(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	BindFlags(fs)
	if err := fs.Parse([]string{"--policy-w2", "0.5"}); err != nil {
		t.Fatal(err)
	}
	c, err := Load(Source{
		File:      writeFile(t, "upstream: http://u\npolicy: {name: smdp, sla: 50ms, batch: 4}\n"),
		LookupEnv: env(map[string]string{"RATEBATCH_POLICY_ROW_CAP": "48"}),
		Flags:     fs,
	})
	if err != nil {
		t.Fatal(err)
	}
	sla := policy.DeadlineOptions{SLA: 50 * time.Millisecond}
	want := policy.NewOptions(
		policy.MaxBatchOptions{MaxQueueDelay: 5 * time.Millisecond},
		policy.StaticOptions{Batch: 4},
		policy.SMDPOptions{W1: 1, W2: 0.5},
		policy.ElasticOptions{RowCap: 48},
		// sla is one key for the two policies whose options have it.
		policy.SlackOptions{DeadlineOptions: sla},
		policy.BudgetOptions{DeadlineOptions: sla},
	)
	if !reflect.DeepEqual(c.Policy.Options, want) {
		t.Fatalf("policy options %+v, want %+v", c.Policy.Options, want)
	}
	if _, err := Load(Source{File: writeFile(t, "upstream: http://u\npolicy: {util: 0.5}\n")}); err == nil || !strings.Contains(err.Error(), "util") {
		t.Fatalf("a Go-only parameter as a YAML key: err = %v", err)
	}
}

func TestBadFlagFailsAtParse(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	BindFlags(fs)
	if err := fs.Parse([]string{"-limits-max-body-bytes", "lots"}); err == nil {
		t.Fatal("want a parse error for a bad size")
	}
}

func TestBoolFlagBareOrValued(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--admin-pprof"}, true},
		{[]string{"--admin-pprof=true"}, true},
		{[]string{"--admin-pprof=false"}, false},
	} {
		fs := flags(t, append(tc.args, "--upstream", "http://u")...)
		c, err := Load(Source{Flags: fs, LookupEnv: env(nil)})
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if c.AdminPprof != tc.want {
			t.Errorf("%v: admin_pprof = %v, want %v", tc.args, c.AdminPprof, tc.want)
		}
	}
}

func TestEmptyFileIsDefaults(t *testing.T) {
	c, err := Load(Source{File: writeFile(t, ""), LookupEnv: env(map[string]string{"RATEBATCH_UPSTREAM": "http://u"})})
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy.Name != Default().Policy.Name {
		t.Fatalf("policy = %q", c.Policy.Name)
	}
}

func TestRedactedMasksToken(t *testing.T) {
	c := Default()
	c.AdminToken = "s3cret"
	c.Upstream = "http://user:pa55@triton:8000"
	r := c.Redacted()
	if r.AdminToken == "s3cret" || c.AdminToken != "s3cret" {
		t.Fatalf("redacted %q, original %q", r.AdminToken, c.AdminToken)
	}
	if strings.Contains(r.Upstream, "pa55") || !strings.Contains(r.Upstream, "triton:8000") {
		t.Fatalf("upstream redacted as %q", r.Upstream)
	}
}

// Every URL option is shown without the credentials it carries: user
// information, and query parameters named for a secret.
func TestRedactedMasksURLSecrets(t *testing.T) {
	c := Default()
	c.Upstream = "http://tok-up@triton:8000"
	c.Tracing.OTLPEndpoint = "https://user:pw-otel@otel.example:4318"
	c.Power.MetricsURL = "http://triton:8002/metrics?token=tok-metrics&format=text"
	r := c.Redacted()
	for name, got := range map[string]string{"upstream": r.Upstream, "tracing.otlp_endpoint": r.Tracing.OTLPEndpoint, "power.metrics_url": r.Power.MetricsURL} {
		if strings.Contains(got, "tok-") || strings.Contains(got, "pw-") {
			t.Errorf("%s shown as %q", name, got)
		}
	}
	if r.Power.MetricsURL != "http://triton:8002/metrics?token=REDACTED&format=text" {
		t.Errorf("power.metrics_url shown as %q: want only the token masked", r.Power.MetricsURL)
	}
	if c.Power.MetricsURL != "http://triton:8002/metrics?token=tok-metrics&format=text" {
		t.Errorf("Redacted changed the original: %q", c.Power.MetricsURL)
	}
}

// The command line (ps, /debug/pprof/cmdline) is shown without the admin
// token, in any flag spelling, nor a URL's credentials.
func TestRedactArgs(t *testing.T) {
	args := []string{"ratebatch", "serve", "--admin-token", "tok-1", "-admin-token=tok-2", "--admin-token=tok-3",
		"--upstream", "http://u:pw-1@triton:8000", "--power-metrics-url=http://h/m?key=pw-2", "--listen", ":9000"}
	got := RedactArgs(args)
	want := []string{"ratebatch", "serve", "--admin-token", "REDACTED", "-admin-token=REDACTED", "--admin-token=REDACTED",
		"--upstream", "http://REDACTED@triton:8000", "--power-metrics-url=http://h/m?key=REDACTED", "--listen", ":9000"}
	if !slices.Equal(got, want) {
		t.Fatalf("RedactArgs\n got %q\nwant %q", got, want)
	}
	if args[3] != "tok-1" {
		t.Fatal("RedactArgs changed its argument")
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want Bytes
		ok   bool
	}{
		{"1024", 1024, true}, {"64MiB", 64 << 20, true}, {"1GB", 1e9, true}, {"2 KiB", 2048, true},
		{"-1", 0, false}, {"x", 0, false}, {"99999999999GiB", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseBytes(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseBytes(%q) = %v, %v; want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
	if s := Bytes(64 << 20).String(); s != "64MiB" {
		t.Errorf("String() = %q", s)
	}
}

// TestConfigDocUpToDate keeps docs/CONFIG.md's option table generated from
// the schema. Regenerate with: go test ./config -run TestConfigDoc -update
func TestConfigDocUpToDate(t *testing.T) {
	path := filepath.Join("..", "docs", "CONFIG.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- options:begin -->\n", "<!-- options:end -->"
	s := string(doc)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the %q ... %q markers", path, begin, end)
	}
	want := Markdown()
	if got := s[i+len(begin) : j]; got != want {
		if *update {
			s = s[:i+len(begin)] + want + s[j:]
			if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Fatalf("%s option table is stale; run: go test ./config -run TestConfigDoc -update", path)
	}
}

var update = flag.Bool("update", false, "rewrite docs/CONFIG.md's option table")

// Triton's gRPC address and metrics URL default to the upstream's host on
// Triton's ports; an IPv6 host keeps its brackets.
func TestUpstreamDerivedDefaults(t *testing.T) {
	for _, tc := range []struct{ upstream, grpc, metrics, wantGRPC, wantMetrics string }{
		{"http://triton:8000", "", "", "triton:8001", "http://triton:8002/metrics"},
		{"http://[::1]:8000/base", "", "", "[::1]:8001", "http://[::1]:8002/metrics"},
		{"https://[2001:db8::7]", "", "", "[2001:db8::7]:8001", "http://[2001:db8::7]:8002/metrics"},
		{"https://triton.example", "", "", "triton.example:8001", "http://triton.example:8002/metrics"},
		{"http://127.0.0.1:8000", "", "", "127.0.0.1:8001", "http://127.0.0.1:8002/metrics"},
		{"http://triton:8000", "other:9001", "http://gpu-host:9400/metrics", "other:9001", "http://gpu-host:9400/metrics"},
	} {
		c := Config{Upstream: tc.upstream, UpstreamGRPC: tc.grpc, Power: Power{MetricsURL: tc.metrics}}
		if got := c.UpstreamGRPCAddr(); got != tc.wantGRPC {
			t.Errorf("upstream %q, upstream_grpc %q: got %q, want %q", tc.upstream, tc.grpc, got, tc.wantGRPC)
		}
		if got := c.MetricsURL(); got != tc.wantMetrics {
			t.Errorf("upstream %q, metrics_url %q: got %q, want %q", tc.upstream, tc.metrics, got, tc.wantMetrics)
		}
	}
	bad := Default()
	bad.Upstream = "http://triton:8000"
	bad.UpstreamGRPC = "triton"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "upstream_grpc") {
		t.Errorf("upstream_grpc without a port: got %v, want an upstream_grpc error", err)
	}
	bad.UpstreamGRPC, bad.GRPCListen = "", bad.Listen
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "grpc_listen") {
		t.Errorf("grpc_listen = listen: got %v, want a grpc_listen error", err)
	}
}

// power.source auto reads Triton's metrics where they are known to be: at
// power.metrics_url, or beside an upstream on Triton's port 8000 (the
// README's try-it emulator and a default Triton); elsewhere none.
func TestPowerSourceAuto(t *testing.T) {
	tests := []struct {
		source, upstream, metrics string
		kind, url                 string
	}{
		{"auto", "http://127.0.0.1:8000", "", "triton", "http://127.0.0.1:8002/metrics"},
		{"auto", "http://triton:8000/", "", "triton", "http://triton:8002/metrics"},
		{"auto", "http://[::1]:8000", "", "triton", "http://[::1]:8002/metrics"},
		{"auto", "http://127.0.0.1:38211", "", "none", ""},
		{"auto", "http://triton", "", "none", ""},
		{"auto", "http://127.0.0.1:38211", "http://m:9/metrics", "triton", "http://m:9/metrics"},
		{"triton", "http://127.0.0.1:38211", "", "triton", "http://127.0.0.1:8002/metrics"},
		{"none", "http://127.0.0.1:8000", "", "none", ""},
		{"nvml", "http://127.0.0.1:8000", "", "nvml", ""},
	}
	for _, tt := range tests {
		c := Default()
		c.Upstream, c.Power.Source, c.Power.MetricsURL = tt.upstream, tt.source, tt.metrics
		if _, missing := power.LookupKind(tt.source); tt.source == PowerAuto || missing == nil { // not nvml in a build without it
			if err := c.Validate(); err != nil {
				t.Fatalf("%+v: %v", tt, err)
			}
		}
		if kind, url := c.PowerSource(); kind != tt.kind || url != tt.url {
			t.Errorf("source %s, upstream %s, metrics_url %q: %s %q, want %s %q", tt.source, tt.upstream, tt.metrics, kind, url, tt.kind, tt.url)
		}
	}
	if Default().Power.Source != PowerAuto {
		t.Errorf("the default power.source is %q, want auto", Default().Power.Source)
	}
}

// power.source takes auto or a registered energy source (a source
// registered outside package power is server's TestPowerSourceRegistered
// InATestIsOpened); a misspelt one is refused with the name it is nearest
// to, and one this build leaves out with why.
func TestPowerSourceIsRegistered(t *testing.T) {
	_, nvmlErr := power.LookupKind(power.KindNVML)
	for _, tc := range []struct {
		source, err string // in the error; "" for none
	}{
		{"auto", ""},
		{"none", ""},
		{"triton", ""},
		{"nvlm", "did you mean nvml?"},
		{"atuo", "did you mean auto?"},
		{"rapl", `unknown energy source "rapl" (known: auto, none, nvml, triton)`},
	} {
		c := Default()
		c.Upstream, c.Power.Source = "http://u", tc.source
		err := c.Validate()
		var fe *FieldError
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.source, err)
		case tc.err != "" && (!errors.As(err, &fe) || fe.Field != "power.source" || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one for power.source with %q", tc.source, err, tc.err)
		}
	}
	c := Default()
	c.Upstream, c.Power.Source = "http://u", power.KindNVML
	if err := c.Validate(); (err == nil) != (nvmlErr == nil) || nvmlErr != nil && !strings.Contains(err.Error(), "rebuild with cgo") {
		t.Errorf("nvml (%v in this build): %v", nvmlErr, err)
	}
}

// The forwarded headers' options: the names forwarded are forward_headers'
// and each restricted_api's KEY; what is not a header name, a spec
// without its category or a pattern that does not compile is refused,
// naming the field but never a restricted value; the values of
// upstream_headers read ${NAME} from the environment, and are masked with
// restricted_api's in what is shown.
func TestForwardedHeaders(t *testing.T) {
	c := Default()
	c.Upstream = "http://triton:8000"
	c.ForwardHeaders = " x-tenant, X-Team "
	c.RestrictedAPI = RestrictedAPI{"inference:api-key=k1", "shared-memory,model-repository:admin-key=k2"}
	c.ForwardHeaderPattern = "^x-meta-"
	c.UpstreamHeaders = map[string]string{"Api-Key": "${KEY}", "X-Static": "s"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := c.ForwardNames(), []string{"x-tenant", "X-Team"}; !slices.Equal(got, want) {
		t.Fatalf("forwarded names %q, want %q", got, want)
	}
	if got, want := c.RestrictedKeys(), []string{"api-key", "admin-key"}; !slices.Equal(got, want) {
		t.Fatalf("restricted keys %q, want %q", got, want)
	}
	env := map[string]string{"KEY": "from-env"}
	h := c.UpstreamHeaderValues(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if h["Api-Key"] != "from-env" || h["X-Static"] != "s" {
		t.Fatalf("upstream headers %v", h)
	}
	r := c.Redacted()
	if shown := r.RestrictedAPI.String(); strings.Contains(shown, "k1") || strings.Contains(shown, "k2") ||
		r.UpstreamHeaders["Api-Key"] != "REDACTED" || c.UpstreamHeaders["Api-Key"] != "${KEY}" {
		t.Fatalf("redacted %q %v; original %v", r.RestrictedAPI, r.UpstreamHeaders, c.UpstreamHeaders)
	}
	for _, tc := range []struct {
		set   func(*Config)
		field string
	}{
		{func(c *Config) { c.ForwardHeaders = "x tenant" }, "forward_headers"},
		{func(c *Config) { c.RestrictedAPI = RestrictedAPI{"api-key=secret-value"} }, "restricted_api"},
		{func(c *Config) { c.ForwardHeaderPattern = "(" }, "forward_header_pattern"},
		{func(c *Config) { c.UpstreamHeaders = map[string]string{"bad name": "v"} }, "upstream_headers"},
	} {
		bad := c
		tc.set(&bad)
		err := bad.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) || strings.Contains(err.Error(), "secret-value") {
			t.Errorf("%s: %v, want a refusal naming the field and no secret", tc.field, err)
		}
	}
}

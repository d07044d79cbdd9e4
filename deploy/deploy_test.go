// Package deploy_test checks that the shipping artefacts (Dockerfile,
// docker-compose.yml, deploy/) agree with the code: the ratebatch
// configuration each one gives is loaded the way `ratebatch serve` loads it,
// its addresses line up with the ports the other pieces use, and the Grafana
// dashboard asks only for metrics the code exports. Schema and lint checks
// of the same files live in tests/deploy (scripts/validate-deploy.sh).
package deploy_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/door"
)

// root is the repository root; go test runs in deploy/.
const root = ".."

// loadServe loads a configuration as `ratebatch serve ARGS` would with env as
// its environment. mounts maps paths in the container to files here.
func loadServe(args []string, env, mounts map[string]string) (*config.Config, error) {
	if len(args) == 0 || args[0] != "serve" {
		return nil, fmt.Errorf("command %q does not start with serve", args)
	}
	// The flag set of cmd/ratebatch/serve.go: --config plus config.BindFlags.
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	file := fs.String("config", "", "")
	config.BindFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return nil, fmt.Errorf("serve flags %q: %w", args[1:], err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	host := ""
	if *file != "" {
		var ok bool
		if host, ok = mounts[*file]; !ok {
			return nil, fmt.Errorf("--config %s is not mounted into the container", *file)
		}
	}
	return config.Load(config.Source{
		File:      host,
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Flags:     fs,
	})
}

func mustPort(t *testing.T, what, hostport string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatalf("%s %q: %v", what, hostport, err)
	}
	return port
}

// metricsURL is the URL the triton energy source reads: power.metrics_url,
// or by default the upstream's host on port 8002 (docs/CONFIG.md).
func metricsURL(t *testing.T, c *config.Config) *url.URL {
	t.Helper()
	raw := c.Power.MetricsURL
	if raw == "" {
		up, err := url.Parse(c.Upstream)
		if err != nil {
			t.Fatal(err)
		}
		raw = "http://" + net.JoinHostPort(up.Hostname(), "8002") + "/metrics"
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// flagValue returns the value of --name=V or --name V in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func decodeYAMLFile(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// --- docker-compose.yml ------------------------------------------------------

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
}

var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}`)

// interpolate applies compose's ${VAR:-default} with no variable set.
func interpolate(s string) string {
	return composeVar.ReplaceAllString(s, "$2")
}

// mounts maps container paths to repository files for the bind mounts.
func (s composeService) mounts() map[string]string {
	m := map[string]string{}
	for _, v := range s.Volumes {
		parts := strings.Split(interpolate(v), ":")
		if len(parts) >= 2 && strings.HasPrefix(parts[0], ".") {
			m[parts[1]] = filepath.Join(root, parts[0])
		}
	}
	return m
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	decodeYAMLFile(t, filepath.Join(root, "docker-compose.yml"), &c)
	for _, name := range []string{"ratebatch", "triton", "prometheus"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("docker-compose.yml: no service %s", name)
		}
	}
	return c
}

type promConfig struct {
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func TestComposeRatebatchConfig(t *testing.T) {
	c := readCompose(t)
	rb, triton := c.Services["ratebatch"], c.Services["triton"]
	env := map[string]string{}
	for k, v := range rb.Environment {
		env[k] = interpolate(v)
	}
	cfg, err := loadServe(rb.Command, env, rb.mounts())
	if err != nil {
		t.Fatalf("services.ratebatch does not start: %v", err)
	}

	// Upstream: the triton service on the HTTP port Triton listens on.
	up, err := url.Parse(cfg.Upstream)
	if err != nil {
		t.Fatal(err)
	}
	tritonHTTP, _ := flagValue(triton.Command, "--http-port")
	if up.Hostname() != "triton" || up.Port() != tritonHTTP {
		t.Errorf("upstream %s: want http://triton:%s (triton's --http-port)", cfg.Upstream, tritonHTTP)
	}

	// Data port: published on the host under the same number (Triton's usual 8000).
	listen := mustPort(t, "listen", cfg.Listen)
	if !slices.Contains(rb.Ports, listen+":"+listen) {
		t.Errorf("listen %s: want %s:%s in services.ratebatch.ports %q", cfg.Listen, listen, listen, rb.Ports)
	}
	if listen != "8000" {
		t.Errorf("listen %s: clients expect Triton's usual HTTP port 8000", cfg.Listen)
	}

	// gRPC door: published as Triton's usual 8001, relaying to Triton's gRPC port.
	grpcListen := mustPort(t, "grpc_listen", cfg.GRPCListen)
	if grpcListen != "8001" || !slices.Contains(rb.Ports, grpcListen+":"+grpcListen) {
		t.Errorf("grpc_listen %s: want Triton's usual gRPC port 8001, published as 8001:8001 (ports %q)", cfg.GRPCListen, rb.Ports)
	}
	tritonGRPC, _ := flagValue(triton.Command, "--grpc-port")
	if host, port, _ := net.SplitHostPort(cfg.UpstreamGRPCAddr()); host != "triton" || port != tritonGRPC {
		t.Errorf("upstream_grpc %s: want triton:%s (triton's --grpc-port)", cfg.UpstreamGRPCAddr(), tritonGRPC)
	}

	// Admin port: reachable from the Prometheus container, and scraped.
	host, admin, _ := net.SplitHostPort(cfg.AdminListen)
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("admin_listen %s: Prometheus in another container cannot reach %s", cfg.AdminListen, host)
	}
	var prom promConfig
	decodeYAMLFile(t, filepath.Join(root, "deploy/prometheus/prometheus.yml"), &prom)
	targets := map[string]bool{}
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				targets[tg] = true
			}
		}
	}
	if !targets["ratebatch:"+admin] {
		t.Errorf("prometheus.yml does not scrape ratebatch:%s (admin_listen %s)", admin, cfg.AdminListen)
	}
	if !slices.Contains(cfg.AdminHostNames(), "ratebatch") {
		t.Errorf("prometheus.yml scrapes ratebatch:%s, but admin_hosts %q lacks ratebatch: the admin port would answer 421", admin, cfg.AdminHosts)
	}
	tritonMetrics, _ := flagValue(triton.Command, "--metrics-port")
	if !targets["triton:"+tritonMetrics] {
		t.Errorf("prometheus.yml does not scrape triton:%s (triton's --metrics-port)", tritonMetrics)
	}

	// Energy from Triton: the URL the source reads is Triton's metrics port.
	if cfg.Power.Source == "triton" {
		if u := metricsURL(t, cfg); u.Hostname() != "triton" || u.Port() != tritonMetrics {
			t.Errorf("power: triton source reads %s, but Triton's metrics are on triton:%s", u, tritonMetrics)
		}
	}
}

// --- deploy/kubernetes ---------------------------------------------------------

type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Template struct {
			Spec struct {
				Containers []k8sContainer `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string         `yaml:"name"`
		Value     string         `yaml:"value"`
		ValueFrom map[string]any `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
	ReadinessProbe k8sProbe `yaml:"readinessProbe"`
}

// k8sProbe is a container probe's HTTP form and timing (Kubernetes'
// defaults where the manifest says nothing: 10 s period, 1 s timeout, 1
// success, 3 failures).
type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	TimeoutSeconds   int `yaml:"timeoutSeconds"`
	SuccessThreshold int `yaml:"successThreshold"`
	FailureThreshold int `yaml:"failureThreshold"`
}

func (c k8sContainer) port(name string) string {
	for _, p := range c.Ports {
		if p.Name == name {
			return fmt.Sprint(p.ContainerPort)
		}
	}
	return ""
}

func readManifests(t *testing.T) []k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "deploy/kubernetes/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/kubernetes: %v", err)
	}
	var objs []k8sObject
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(data)))
		for {
			var o k8sObject
			if err := dec.Decode(&o); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			objs = append(objs, o)
		}
	}
	return objs
}

// shippedRatebatch is the Deployment's ratebatch and triton containers
// and the configuration the ratebatch container starts with (its args,
// environment and ConfigMap files as mounted).
func shippedRatebatch(t *testing.T) (rb, triton k8sContainer, cfg *config.Config) {
	t.Helper()
	objs := readManifests(t)
	var deploy *k8sObject
	configMaps := map[string]map[string]string{}
	for i, o := range objs {
		switch o.Kind {
		case "Deployment":
			deploy = &objs[i]
		case "ConfigMap":
			configMaps[o.Metadata.Name] = o.Data
		}
	}
	if deploy == nil {
		t.Fatal("deploy/kubernetes: no Deployment")
	}
	pod := deploy.Spec.Template.Spec
	for _, c := range pod.Containers {
		switch c.Name {
		case "ratebatch":
			rb = c
		case "triton":
			triton = c
		}
	}
	if rb.Name == "" || triton.Name == "" {
		t.Fatal("the Deployment needs containers ratebatch and triton")
	}

	// ConfigMap files as the container sees them, written out for config.Load.
	dir := t.TempDir()
	mounts := map[string]string{}
	for _, m := range rb.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			for key, body := range configMaps[v.ConfigMap.Name] {
				host := filepath.Join(dir, v.ConfigMap.Name+"-"+key)
				if err := os.WriteFile(host, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
				mounts[path.Join(m.MountPath, key)] = host
			}
		}
	}
	env := map[string]string{}
	for _, e := range rb.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil {
			env[e.Name] = "from-a-secret"
		}
	}
	cfg, err := loadServe(rb.Args, env, mounts)
	if err != nil {
		t.Fatalf("container ratebatch does not start: %v", err)
	}
	return rb, triton, cfg
}

func TestKubernetesRatebatchConfig(t *testing.T) {
	rb, triton, cfg := shippedRatebatch(t)
	tritonHTTP, _ := flagValue(triton.Args, "--http-port")
	tritonMetrics, _ := flagValue(triton.Args, "--metrics-port")
	up, _ := url.Parse(cfg.Upstream)
	if up.Hostname() != "127.0.0.1" && up.Hostname() != "localhost" || up.Port() != tritonHTTP {
		t.Errorf("upstream %s: want Triton in the same pod, http://127.0.0.1:%s", cfg.Upstream, tritonHTTP)
	}
	if got, want := mustPort(t, "listen", cfg.Listen), rb.port("http"); got != want {
		t.Errorf("listen %s, but the container port named http is %s", cfg.Listen, want)
	}
	host, admin, _ := net.SplitHostPort(cfg.AdminListen)
	if admin != rb.port("admin") {
		t.Errorf("admin_listen %s, but the container port named admin is %s", cfg.AdminListen, rb.port("admin"))
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("admin_listen %s: the kubelet's probes and Prometheus reach the pod IP, not %s", cfg.AdminListen, host)
	}
	if tritonHTTP == mustPort(t, "listen", cfg.Listen) {
		t.Errorf("Triton's --http-port %s collides with ratebatch's listen port", tritonHTTP)
	}
	tritonGRPC, _ := flagValue(triton.Args, "--grpc-port")
	if got, want := mustPort(t, "grpc_listen", cfg.GRPCListen), rb.port("grpc"); got != want || got != "8001" {
		t.Errorf("grpc_listen %s, but the container port named grpc is %s (want Triton's usual 8001)", cfg.GRPCListen, want)
	}
	if host, port, _ := net.SplitHostPort(cfg.UpstreamGRPCAddr()); host != "127.0.0.1" && host != "localhost" || port != tritonGRPC || port != triton.port("triton-grpc") {
		t.Errorf("upstream_grpc %s: want Triton's gRPC port in the same pod, 127.0.0.1:%s", cfg.UpstreamGRPCAddr(), tritonGRPC)
	}
	if tritonGRPC == mustPort(t, "grpc_listen", cfg.GRPCListen) {
		t.Errorf("Triton's --grpc-port %s collides with ratebatch's grpc_listen port", tritonGRPC)
	}
	if cfg.Power.Source == "triton" {
		if u := metricsURL(t, cfg); u.Port() != tritonMetrics || u.Port() != triton.port("triton-metrics") {
			t.Errorf("power: triton source reads %s, but Triton's metrics port is %s", u, tritonMetrics)
		}
	}
}

// --- Dockerfile --------------------------------------------------------------

// The images' default command must parse as serve flags, serve both of
// Triton's data doors (HTTP 8000, gRPC 8001) and keep the admin port on
// loopback (a configuration opens it where it is needed), and each stage
// must EXPOSE exactly the ports its command listens on beyond loopback.
func TestDockerfileCommand(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds int
	var exposed []string // the current stage's
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "FROM ") {
			exposed = nil
		}
		if ports, ok := strings.CutPrefix(line, "EXPOSE "); ok {
			exposed = append(exposed, strings.Fields(ports)...)
		}
		rest, ok := strings.CutPrefix(line, "CMD ")
		if !ok {
			continue
		}
		var args []string
		if err := json.Unmarshal([]byte(rest), &args); err != nil {
			t.Fatalf("Dockerfile: CMD %s: use the JSON form: %v", rest, err)
		}
		cmds++
		env := map[string]string{"RATEBATCH_UPSTREAM": "http://triton:8000"}
		cfg, err := loadServe(args, env, nil)
		if err != nil {
			t.Errorf("Dockerfile: CMD %s: %v", rest, err)
			continue
		}
		if cfg.GRPCListen == "" {
			t.Errorf("Dockerfile: CMD %s serves no gRPC door (--grpc-listen)", rest)
			continue
		}
		listens := []string{mustPort(t, "listen", cfg.Listen), mustPort(t, "grpc_listen", cfg.GRPCListen)}
		if want := []string{"8000", "8001"}; !slices.Equal(listens, want) {
			t.Errorf("Dockerfile: CMD %s serves data on %v, want Triton's ports %v", rest, listens, want)
		}
		if host, _, _ := net.SplitHostPort(cfg.AdminListen); !net.ParseIP(host).IsLoopback() {
			t.Errorf("Dockerfile: CMD %s serves the admin port on %s: keep it on loopback by default", rest, cfg.AdminListen)
		}
		slices.Sort(listens)
		if got := slices.Sorted(slices.Values(exposed)); !slices.Equal(got, listens) {
			t.Errorf("Dockerfile: CMD %s listens on %v but its stage EXPOSEs %v", rest, listens, got)
		}
	}
	if cmds == 0 {
		t.Fatal("Dockerfile: no CMD")
	}
}

// --- names shared with the code ------------------------------------------------

// Every RATEBATCH_* variable the deploy files set is one ratebatch reads;
// config.Load ignores unknown ones, so a typo would pass silently.
func TestDeployEnvVarsAreOptions(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	config.BindFlags(fs)
	known := map[string]bool{}
	envInUsage := regexp.MustCompile(`env (` + config.EnvPrefix + `[A-Z0-9_]+)`)
	fs.VisitAll(func(f *flag.Flag) {
		if m := envInUsage.FindStringSubmatch(f.Usage); m != nil {
			known[m[1]] = true
		}
	})
	if len(known) < 10 {
		t.Fatalf("found only %d options' variables in the flags' usage; has its format changed?", len(known))
	}
	used := regexp.MustCompile(config.EnvPrefix + `[A-Z0-9_]+`)
	files := []string{filepath.Join(root, "docker-compose.yml"), filepath.Join(root, "Dockerfile")}
	more, _ := filepath.Glob(filepath.Join(root, "deploy/kubernetes/*.yaml"))
	for _, f := range append(files, more...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range used.FindAllString(string(data), -1) {
			if !known[name] {
				t.Errorf("%s: %s is not a ratebatch option (docs/CONFIG.md)", f, name)
			}
		}
	}
}

// goStrings returns the metric-like string literals in the non-test Go files
// under dirs, e.g. "ratebatch_batch_size".
func goStrings(t *testing.T, prefix string, dirs ...string) map[string]bool {
	t.Helper()
	lit := regexp.MustCompile(`"(` + prefix + `[a-z0-9_]+)`)
	found := map[string]bool{}
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && p != filepath.Join(root, d) && (strings.HasPrefix(e.Name(), ".") || e.Name() == "deploy" || e.Name() == "testdata") {
				return filepath.SkipDir
			}
			if e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range lit.FindAllStringSubmatch(string(data), -1) {
				found[m[1]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return found
}

// exported reports whether series name comes from metric family in known,
// counting a histogram's _bucket, _sum and _count series.
func exported(name string, known map[string]bool) bool {
	if known[name] {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok && known[base] {
			return true
		}
	}
	return false
}

func TestDashboardMetricsExist(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "deploy/grafana/dashboards/ratebatch.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("ratebatch.json: %v", err)
	}
	ours := goStrings(t, "ratebatch_", ".")
	// Triton's own series, as the emulator mirrors them.
	tritons := goStrings(t, "nv_", "lab/emulator")
	series := regexp.MustCompile(`\b(ratebatch|nv)_[a-z0-9_]+\b`)
	checked := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, name := range series.FindAllString(tg.Expr, -1) {
				known := ours
				if strings.HasPrefix(name, "nv_") {
					known = tritons
				}
				checked++
				if !exported(name, known) {
					t.Errorf("panel %q uses %s, which no Go source exports", p.Title, name)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d metric references found in the dashboard", checked)
	}
}

func TestExportedCountsHistogramSeries(t *testing.T) {
	known := map[string]bool{"ratebatch_batch_size": true, "ratebatch_arrivals_total": true}
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"ratebatch_batch_size", true},
		{"ratebatch_batch_size_bucket", true},
		{"ratebatch_batch_size_sum", true},
		{"ratebatch_arrivals_total", true},
		{"ratebatch_arrivals", false},
		{"ratebatch_batch_sizes", false},
		{"ratebatch_nope_bucket", false},
	} {
		if got := exported(tc.name, known); got != tc.want {
			t.Errorf("exported(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Both shipped configurations (compose's file, the Kubernetes ConfigMap)
// close Triton's mutating routes to clients, at both doors: the data
// ports are the only way in (the NetworkPolicy, Triton unpublished), so a
// route open there is open to every client.
func TestShippedConfigsCloseMutatingRoutes(t *testing.T) {
	c := readCompose(t)
	compose, err := loadServe(c.Services["ratebatch"].Command, nil, c.Services["ratebatch"].mounts())
	if err != nil {
		t.Fatal(err)
	}
	_, _, k8s := shippedRatebatch(t)
	for name, cfg := range map[string]*config.Config{"docker-compose.yml": compose, "deploy/kubernetes": k8s} {
		rules, err := cfg.RestrictedAPI.Rules()
		if err != nil {
			t.Fatalf("%s: restricted_api: %v", name, err)
		}
		for _, c := range []door.Category{door.ModelRepositoryAPI, door.SharedMemoryAPI, door.LoggingAPI, door.TraceAPI} {
			if r := rules[c]; !r.Closed && r.Key == "" {
				t.Errorf("%s: %s open to every client", name, c)
			}
		}
		for _, c := range []door.Category{door.InferenceAPI, door.HealthAPI, door.MetadataAPI} {
			if rules[c] != (door.Rule{}) {
				t.Errorf("%s: %s restricted: clients need it", name, c)
			}
		}
	}
}

package deploy_test

// The manifests of many GPUs (deploy/kubernetes/inference-extension and
// autoscaling/): the Gateway API Inference Extension's InferencePool and
// endpoint picker, the KEDA ScaledObject and the HPA. Their schemas are not
// served here (the extension's, KEDA's and prometheus-adapter's Go modules
// are not in the module proxy), so each object is decoded into the fields
// of its published API reference with unknown fields refused, then checked
// against the pods, ports and metrics it names. docs/SCALING.md says what
// this does not check.

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/ratebatch/ratebatch/orca"
	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// strictDocs decodes each YAML document of file into a new T, refusing
// fields T does not declare; kinds other than want are skipped.
func strictDocs[T any](data []byte, want string) ([]T, error) {
	var out []T
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var node yaml.Node
		if err := dec.Decode(&node); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		var head struct {
			Kind string `yaml:"kind"`
		}
		if err := node.Decode(&head); err != nil {
			return nil, err
		}
		if head.Kind != want {
			continue
		}
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		if err := enc.Encode(&node); err != nil {
			return nil, err
		}
		strict := yaml.NewDecoder(&buf)
		strict.KnownFields(true)
		var v T
		if err := strict.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
}

func readStrict[T any](t *testing.T, file, kind string) []T {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strictDocs[T](data, kind)
	if err != nil {
		t.Fatalf("%s: %s: %v", file, kind, err)
	}
	if len(v) == 0 {
		t.Fatalf("%s: no %s", file, kind)
	}
	return v
}

type objectMeta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// inferencePool is inference.networking.k8s.io/v1 InferencePool as the
// extension's API reference gives it (spec fields; status is the
// controller's).
type inferencePool struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
	Spec       struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		TargetPorts []struct {
			Number int `yaml:"number"`
		} `yaml:"targetPorts"`
		AppProtocol       string `yaml:"appProtocol"`
		EndpointPickerRef struct {
			Group *string `yaml:"group"`
			Kind  string  `yaml:"kind"`
			Name  string  `yaml:"name"`
			Port  *struct {
				Number int `yaml:"number"`
			} `yaml:"port"`
			FailureMode string `yaml:"failureMode"`
		} `yaml:"endpointPickerRef"`
	} `yaml:"spec"`
}

type service struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
	Spec       struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name        string `yaml:"name"`
			Port        int    `yaml:"port"`
			TargetPort  any    `yaml:"targetPort"`
			Protocol    string `yaml:"protocol"`
			AppProtocol string `yaml:"appProtocol"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

// workload is a Deployment with what these checks read of it.
type workload struct {
	Kind     string     `yaml:"kind"`
	Metadata objectMeta `yaml:"metadata"`
	Spec     struct {
		Template struct {
			Metadata objectMeta `yaml:"metadata"`
			Spec     struct {
				Containers []k8sContainer `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// readWorkloads reads the Deployments of file.
func readWorkloads(t *testing.T, file string) []workload {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	var out []workload
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o workload
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if o.Kind == "Deployment" {
			out = append(out, o)
		}
	}
}

// ratebatchPods returns the ratebatch Deployment's pod labels and the
// ratebatch container's ports by name.
func ratebatchPods(t *testing.T) (name string, labels map[string]string, ports map[string]int) {
	t.Helper()
	ws := readWorkloads(t, "deploy/kubernetes/deployment.yaml")
	if len(ws) != 1 {
		t.Fatalf("%d Deployments in deploy/kubernetes/deployment.yaml, want 1", len(ws))
	}
	o := ws[0]
	ports = map[string]int{}
	for _, c := range o.Spec.Template.Spec.Containers {
		if c.Name == "ratebatch" {
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
		}
	}
	return o.Metadata.Name, o.Spec.Template.Metadata.Labels, ports
}

// podGauges are the metric families ratebatch exports with no label, one
// series per pod: what a reader of one number per model server can name.
func podGauges(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	r := orca.New(orca.Options{Models: func() []orca.Model {
		return []orca.Model{{RatePerSec: 1, MaxBatch: 1, Instances: 1, LineKnown: true, Latency: batchcost.Latency{Tau0Ms: 1}}}
	}})
	reg.MustRegister(r.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		if len(mf.GetMetric()) == 1 && len(mf.GetMetric()[0].GetLabel()) == 0 {
			out[mf.GetName()] = true
		}
	}
	if len(out) < 3 {
		t.Fatalf("pod-level gauges %v", out)
	}
	return out
}

func flagMap(args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		m[k] = v
	}
	return m
}

func TestInferencePool(t *testing.T) {
	const dir = "deploy/kubernetes/inference-extension/"
	pools := readStrict[inferencePool](t, dir+"inferencepool.yaml", "InferencePool")
	_, podLabels, ports := ratebatchPods(t)
	gauges := podGauges(t)
	for _, p := range pools {
		if p.APIVersion != "inference.networking.k8s.io/v1" {
			t.Errorf("InferencePool apiVersion %q, want inference.networking.k8s.io/v1", p.APIVersion)
		}
		sel := p.Spec.Selector.MatchLabels
		if len(sel) == 0 {
			t.Error("selector.matchLabels empty (required)")
		}
		for k, v := range sel {
			if podLabels[k] != v {
				t.Errorf("selector %s=%s does not match the ratebatch pods' labels %v", k, v, podLabels)
			}
		}
		if n := len(p.Spec.TargetPorts); n < 1 || n > 8 {
			t.Errorf("%d targetPorts, want 1 to 8", n)
		}
		seen := map[int]bool{}
		for _, tp := range p.Spec.TargetPorts {
			if seen[tp.Number] {
				t.Errorf("targetPort %d twice", tp.Number)
			}
			seen[tp.Number] = true
			if tp.Number != ports["http"] && tp.Number != ports["grpc"] {
				t.Errorf("targetPort %d is not ratebatch's http (%d) or grpc (%d) port: requests would skip the proxy", tp.Number, ports["http"], ports["grpc"])
			}
			if tp.Number == ports["grpc"] && p.Spec.AppProtocol != "kubernetes.io/h2c" {
				t.Errorf("targetPort %d is gRPC but appProtocol is %q", tp.Number, p.Spec.AppProtocol)
			}
		}
		if ap := p.Spec.AppProtocol; ap != "" && ap != "http" && ap != "kubernetes.io/h2c" {
			t.Errorf("appProtocol %q: want http or kubernetes.io/h2c", ap)
		}
		ref := p.Spec.EndpointPickerRef
		if ref.Name == "" {
			t.Fatal("endpointPickerRef.name empty (required)")
		}
		if ref.Kind != "" && ref.Kind != "Service" {
			t.Errorf("endpointPickerRef.kind %q: the example's picker is a Service", ref.Kind)
		}
		if ref.Port == nil {
			t.Fatal("endpointPickerRef.port missing (required when kind is Service)")
		}
		if fm := ref.FailureMode; fm != "" && fm != "FailOpen" && fm != "FailClose" {
			t.Errorf("endpointPickerRef.failureMode %q: want FailOpen or FailClose", fm)
		}

		// The picker's Service and Deployment.
		var svc *service
		for _, s := range readStrict[service](t, dir+"epp.yaml", "Service") {
			if s.Metadata.Name == ref.Name {
				svc = &s
			}
		}
		if svc == nil {
			t.Fatalf("endpointPickerRef names Service %q, which epp.yaml does not define", ref.Name)
		}
		var target any
		for _, sp := range svc.Spec.Ports {
			if sp.Port == ref.Port.Number {
				target = sp.TargetPort
			}
		}
		if target == nil {
			t.Fatalf("Service %s has no port %d", ref.Name, ref.Port.Number)
		}
		epps := readWorkloads(t, dir+"epp.yaml")
		if len(epps) != 1 {
			t.Fatalf("epp.yaml has %d Deployments, want 1", len(epps))
		}
		epp := epps[0]
		for k, v := range svc.Spec.Selector {
			if epp.Spec.Template.Metadata.Labels[k] != v {
				t.Errorf("Service %s selects %s=%s, not the picker's pods", ref.Name, k, v)
			}
		}
		c := epp.Spec.Template.Spec.Containers[0]
		flags := flagMap(c.Args)
		if flags["pool-name"] != p.Metadata.Name {
			t.Errorf("picker --pool-name %q, pool is %q", flags["pool-name"], p.Metadata.Name)
		}
		grpcPort := c.port(strings.TrimSpace(strings.Trim(strings.TrimSpace(toString(target)), `"`)))
		if grpcPort == "" {
			grpcPort = toString(target)
		}
		if flags["grpc-port"] != grpcPort {
			t.Errorf("picker --grpc-port %q, but its Service sends port %d to %s", flags["grpc-port"], ref.Port.Number, grpcPort)
		}
		if flags["model-server-metrics-port"] != strconv.Itoa(ports["admin"]) || flags["model-server-metrics-path"] != "/metrics" {
			t.Errorf("picker scrapes port %s path %s; ratebatch's metrics are on its admin port %d at /metrics",
				flags["model-server-metrics-port"], flags["model-server-metrics-path"], ports["admin"])
		}
		for _, f := range []string{"total-queued-requests-metric", "kv-cache-usage-percentage-metric"} {
			if !gauges[flags[f]] {
				t.Errorf("picker --%s=%s is not one of ratebatch's pod-level gauges %v", f, flags[f], gauges)
			}
		}
		if flags["total-queued-requests-metric"] != "ratebatch_waiting_rows" {
			t.Errorf("the picker's queue metric must count the proxy's queue: %q", flags["total-queued-requests-metric"])
		}
	}
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	}
	return ""
}

func TestHTTPRouteReachesThePool(t *testing.T) {
	type route struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
		Spec       struct {
			ParentRefs []struct {
				Group string `yaml:"group"`
				Kind  string `yaml:"kind"`
				Name  string `yaml:"name"`
			} `yaml:"parentRefs"`
			Rules []struct {
				Matches []struct {
					Path struct {
						Type  string `yaml:"type"`
						Value string `yaml:"value"`
					} `yaml:"path"`
				} `yaml:"matches"`
				BackendRefs []struct {
					Group string `yaml:"group"`
					Kind  string `yaml:"kind"`
					Name  string `yaml:"name"`
				} `yaml:"backendRefs"`
			} `yaml:"rules"`
		} `yaml:"spec"`
	}
	rs := readStrict[route](t, "deploy/kubernetes/inference-extension/httproute.yaml", "HTTPRoute")
	pool := readStrict[inferencePool](t, "deploy/kubernetes/inference-extension/inferencepool.yaml", "InferencePool")[0]
	for _, r := range rs {
		if r.APIVersion != "gateway.networking.k8s.io/v1" || len(r.Spec.ParentRefs) == 0 {
			t.Errorf("HTTPRoute %s: apiVersion %q, %d parentRefs", r.Metadata.Name, r.APIVersion, len(r.Spec.ParentRefs))
		}
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				if b.Group != "inference.networking.k8s.io" || b.Kind != "InferencePool" || b.Name != pool.Metadata.Name {
					t.Errorf("backendRef %+v is not the pool %s", b, pool.Metadata.Name)
				}
			}
			for _, m := range rule.Matches {
				if !strings.HasPrefix(m.Path.Value, "/v2") {
					t.Errorf("route matches %q, not the KServe v2 API", m.Path.Value)
				}
			}
		}
	}
}

// The strict decoding is what checks the fields: a misspelt one must fail.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/inference-extension/inferencepool.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, typo := range [][2]string{{"targetPorts:", "targetPort:"}, {"endpointPickerRef:", "extensionRef:"}, {"failureMode:", "failuremode:"}} {
		bad := bytes.Replace(data, []byte(typo[0]), []byte(typo[1]), 1)
		if _, err := strictDocs[inferencePool](bad, "InferencePool"); err == nil {
			t.Errorf("%s -> %s accepted", typo[0], typo[1])
		}
	}
}

// promMetrics are the ratebatch_ series a PromQL expression names.
var promMetric = regexp.MustCompile(`\bratebatch_[a-z0-9_]+\b`)

func TestKEDAScaledObject(t *testing.T) {
	// keda.sh/v1alpha1 ScaledObject, the fields of KEDA's reference used
	// here and the other top-level ones.
	type scaledObject struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
		Spec       struct {
			ScaleTargetRef struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
				Name       string `yaml:"name"`
			} `yaml:"scaleTargetRef"`
			PollingInterval  int  `yaml:"pollingInterval"`
			CooldownPeriod   int  `yaml:"cooldownPeriod"`
			IdleReplicaCount *int `yaml:"idleReplicaCount"`
			MinReplicaCount  *int `yaml:"minReplicaCount"`
			MaxReplicaCount  *int `yaml:"maxReplicaCount"`
			Advanced         struct {
				RestoreToOriginalReplicaCount bool `yaml:"restoreToOriginalReplicaCount"`
				HorizontalPodAutoscalerConfig struct {
					Name     string         `yaml:"name"`
					Behavior map[string]any `yaml:"behavior"`
				} `yaml:"horizontalPodAutoscalerConfig"`
			} `yaml:"advanced"`
			Fallback map[string]any `yaml:"fallback"`
			Triggers []struct {
				Type              string            `yaml:"type"`
				Name              string            `yaml:"name"`
				MetricType        string            `yaml:"metricType"`
				UseCachedMetrics  bool              `yaml:"useCachedMetrics"`
				Metadata          map[string]string `yaml:"metadata"`
				AuthenticationRef map[string]string `yaml:"authenticationRef"`
			} `yaml:"triggers"`
		} `yaml:"spec"`
	}
	sos := readStrict[scaledObject](t, "deploy/kubernetes/autoscaling/keda/scaledobject.yaml", "ScaledObject")
	deployName, _, _ := ratebatchPods(t)
	gauges := podGauges(t)
	for _, so := range sos {
		if so.APIVersion != "keda.sh/v1alpha1" {
			t.Errorf("apiVersion %q", so.APIVersion)
		}
		ref := so.Spec.ScaleTargetRef
		if ref.Name != deployName || (ref.Kind != "" && ref.Kind != "Deployment") {
			t.Errorf("scaleTargetRef %+v, want the Deployment %s", ref, deployName)
		}
		if so.Spec.MinReplicaCount == nil || so.Spec.MaxReplicaCount == nil || *so.Spec.MinReplicaCount < 1 || *so.Spec.MinReplicaCount > *so.Spec.MaxReplicaCount {
			t.Errorf("replica bounds %v..%v", so.Spec.MinReplicaCount, so.Spec.MaxReplicaCount)
		}
		if len(so.Spec.Triggers) != 1 {
			t.Fatalf("%d triggers, want the one on utilization", len(so.Spec.Triggers))
		}
		tr := so.Spec.Triggers[0]
		if tr.Type != "prometheus" || !slices.Contains([]string{"", "AverageValue", "Value"}, tr.MetricType) {
			t.Errorf("trigger type %q metricType %q", tr.Type, tr.MetricType)
		}
		for _, k := range []string{"serverAddress", "query", "threshold"} {
			if tr.Metadata[k] == "" {
				t.Errorf("prometheus trigger without %s", k)
			}
		}
		names := promMetric.FindAllString(tr.Metadata["query"], -1)
		if len(names) == 0 {
			t.Errorf("query %q names no ratebatch series", tr.Metadata["query"])
		}
		for _, n := range names {
			if !gauges[n] {
				t.Errorf("query names %s, not one of ratebatch's pod-level gauges", n)
			}
		}
		if !strings.HasPrefix(strings.TrimSpace(tr.Metadata["query"]), "sum(") {
			t.Errorf("query %q: AverageValue divides the fleet's total by the target; sum the pods' rho", tr.Metadata["query"])
		}
		th, err := strconv.ParseFloat(tr.Metadata["threshold"], 64)
		if err != nil || !(th > 0 && th < 1) {
			t.Errorf("threshold %q: want a rho target between 0 and 1", tr.Metadata["threshold"])
		}
	}
}

func TestHPAOnUtilization(t *testing.T) {
	// autoscaling/v2 HorizontalPodAutoscaler, the fields of the Kubernetes
	// API reference this example uses (a Pods metric).
	type hpa struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
		Spec       struct {
			ScaleTargetRef struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
				Name       string `yaml:"name"`
			} `yaml:"scaleTargetRef"`
			MinReplicas int `yaml:"minReplicas"`
			MaxReplicas int `yaml:"maxReplicas"`
			Metrics     []struct {
				Type string `yaml:"type"`
				Pods struct {
					Metric struct {
						Name     string         `yaml:"name"`
						Selector map[string]any `yaml:"selector"`
					} `yaml:"metric"`
					Target struct {
						Type         string `yaml:"type"`
						AverageValue string `yaml:"averageValue"`
					} `yaml:"target"`
				} `yaml:"pods"`
			} `yaml:"metrics"`
			Behavior struct {
				ScaleDown map[string]any `yaml:"scaleDown"`
				ScaleUp   map[string]any `yaml:"scaleUp"`
			} `yaml:"behavior"`
		} `yaml:"spec"`
	}
	hs := readStrict[hpa](t, "deploy/kubernetes/autoscaling/hpa/hpa.yaml", "HorizontalPodAutoscaler")
	deployName, _, _ := ratebatchPods(t)
	gauges := podGauges(t)
	var rules struct {
		Rules []struct {
			SeriesQuery string `yaml:"seriesQuery"`
			Resources   struct {
				Overrides map[string]map[string]string `yaml:"overrides"`
			} `yaml:"resources"`
			Name struct {
				Matches string `yaml:"matches"`
				As      string `yaml:"as"`
			} `yaml:"name"`
			MetricsQuery string `yaml:"metricsQuery"`
		} `yaml:"rules"`
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/autoscaling/hpa/prometheus-adapter-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("prometheus-adapter rules: %v", err)
	}
	served := map[string]bool{}
	for _, r := range rules.Rules {
		for _, n := range promMetric.FindAllString(r.SeriesQuery, -1) {
			if !gauges[n] {
				t.Errorf("adapter rule reads %s, not a ratebatch pod-level gauge", n)
			}
			if !regexp.MustCompile(r.Name.Matches).MatchString(n) {
				t.Errorf("adapter rule name.matches %q does not match its series %s", r.Name.Matches, n)
			}
		}
		if r.Resources.Overrides["pod"]["resource"] != "pod" || !strings.Contains(r.MetricsQuery, "<<.Series>>") {
			t.Errorf("adapter rule %+v does not map series to pods", r)
		}
		served[r.Name.As] = true
	}
	for _, h := range hs {
		if h.APIVersion != "autoscaling/v2" {
			t.Errorf("apiVersion %q", h.APIVersion)
		}
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != deployName || h.Spec.ScaleTargetRef.APIVersion != "apps/v1" {
			t.Errorf("scaleTargetRef %+v, want apps/v1 Deployment %s", h.Spec.ScaleTargetRef, deployName)
		}
		if h.Spec.MinReplicas < 1 || h.Spec.MinReplicas > h.Spec.MaxReplicas {
			t.Errorf("replicas %d..%d", h.Spec.MinReplicas, h.Spec.MaxReplicas)
		}
		if len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].Type != "Pods" {
			t.Fatalf("metrics %+v, want one Pods metric", h.Spec.Metrics)
		}
		m := h.Spec.Metrics[0].Pods
		if !served[m.Metric.Name] {
			t.Errorf("HPA reads %s, which no adapter rule serves (%v)", m.Metric.Name, served)
		}
		if m.Target.Type != "AverageValue" {
			t.Errorf("target type %q, want AverageValue", m.Target.Type)
		}
		v := m.Target.AverageValue
		f, err := strconv.ParseFloat(strings.TrimSuffix(v, "m"), 64)
		if err == nil && strings.HasSuffix(v, "m") {
			f /= 1000
		}
		if err != nil || !(f > 0 && f < 1) {
			t.Errorf("averageValue %q: want a rho target between 0 and 1", v)
		}
	}
}

package door

import (
	"net/http"
	"regexp"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Triton's HTTP route table (http_server.cc: HTTPAPIServer's regular
// expressions, matched whole against the undecoded path, in the order of
// HTTPAPIServer::Handle), and which category each route's handler checks:
// the oracle HTTPCategory is held to.
var (
	tritonModelRE       = regexp.MustCompile(`^/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?$`)
	tritonServerRE      = regexp.MustCompile(`^/v2(?:/health/(live|ready))?$`)
	tritonSystemShmRE   = regexp.MustCompile(`^/v2/systemsharedmemory(?:/region/([^/]+))?/(status|register|unregister)$`)
	tritonCudaShmRE     = regexp.MustCompile(`^/v2/cudasharedmemory(?:/region/([^/]+))?/(status|register|unregister)$`)
	tritonRepositoryRE  = regexp.MustCompile(`^/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))$`)
	tritonTraceRE       = regexp.MustCompile(`^/v2/trace/setting$`)
	tritonModelKindAPIs = map[string]Category{"ready": HealthAPI, "infer": InferenceAPI, "generate": InferenceAPI,
		"generate_stream": InferenceAPI, "config": ModelConfigAPI, "stats": StatisticsAPI, "": MetadataAPI}
)

func tritonCategory(p string) Category {
	switch p {
	case "/v2/models/stats":
		return StatisticsAPI
	case "/v2/logging":
		return LoggingAPI
	}
	if m := tritonModelRE.FindStringSubmatch(p); m != nil {
		if m[3] == "trace/setting" {
			if m[2] == "" {
				return TraceAPI
			}
		} else {
			return tritonModelKindAPIs[m[3]]
		}
	}
	switch {
	case p == "/v2":
		return MetadataAPI
	case tritonServerRE.MatchString(p):
		return HealthAPI
	case tritonSystemShmRE.MatchString(p), tritonCudaShmRE.MatchString(p):
		return SharedMemoryAPI
	case tritonRepositoryRE.MatchString(p):
		return ModelRepositoryAPI
	case tritonTraceRE.MatchString(p):
		return TraceAPI
	}
	return NoCategory
}

var httpRoutes = []struct {
	path string
	want Category
}{
	{"/v2", MetadataAPI},
	{"/v2/", NoCategory},
	{"/v2/health/live", HealthAPI},
	{"/v2/health/ready", HealthAPI},
	{"/v2/health/dead", NoCategory},
	{"/v2/models/simple", MetadataAPI},
	{"/v2/models/simple/", NoCategory},
	{"/v2/models/simple/versions/1", MetadataAPI},
	{"/v2/models/simple/versions/1/", NoCategory},
	{"/v2/models/simple/versions/x", NoCategory},
	{"/v2/models/simple/versions/1/infer", InferenceAPI},
	{"/v2/models/simple/versions/..%2F..%2Fimage/infer", NoCategory},
	{"/v2/models/simple/infer", InferenceAPI},
	{"/v2/models/simple/generate", InferenceAPI},
	{"/v2/models/simple/generate_stream", InferenceAPI},
	{"/v2/models/simple/ready", HealthAPI},
	{"/v2/models/simple/config", ModelConfigAPI},
	{"/v2/models/simple/stats", StatisticsAPI},
	{"/v2/models/stats", StatisticsAPI},
	{"/v2/models/stats/ready", HealthAPI},
	{"/v2/models/simple/trace/setting", TraceAPI},
	{"/v2/models/simple/versions/1/trace/setting", NoCategory},
	{"/v2/models/simple/infer/", NoCategory},
	{"/v2/models//infer", NoCategory},
	{"/v2/models/", NoCategory},
	{"/v2/logging", LoggingAPI},
	{"/v2/trace/setting", TraceAPI},
	{"/v2/systemsharedmemory/status", SharedMemoryAPI},
	{"/v2/systemsharedmemory/region/r0/register", SharedMemoryAPI},
	{"/v2/systemsharedmemory/region/unregister", NoCategory},
	{"/v2/cudasharedmemory/region/r0/unregister", SharedMemoryAPI},
	{"/v2/cudasharedmemory/status/", NoCategory},
	{"/v2/repository/index", ModelRepositoryAPI},
	{"/v2/repository/models/simple/load", ModelRepositoryAPI},
	{"/v2/repository/models/simple/unload", ModelRepositoryAPI},
	{"/v2/repository/main/models/simple/unload", ModelRepositoryAPI},
	{"/v2/repository/main/index", ModelRepositoryAPI},
	{"/v2/repository/models/index", ModelRepositoryAPI}, // a repository named "models"
	{"/v2/repository/models/simple/../simple/unload", NoCategory},
	{"/v2/repository/models/simple/delete", NoCategory},
	{"/v2/repository/models//load", NoCategory},
	{"/metrics", NoCategory},
	{"", NoCategory},
}

func TestHTTPCategory(t *testing.T) {
	for _, tc := range httpRoutes {
		if got := HTTPCategory(tc.path); got != tc.want {
			t.Errorf("HTTPCategory(%q) = %v, want %v", tc.path, got, tc.want)
		}
		if got := tritonCategory(tc.path); got != tc.want {
			t.Errorf("Triton's routes take %q to %v, the table says %v", tc.path, got, tc.want)
		}
	}
}

// Whatever the path, HTTPCategory reads it as Triton's routes do.
func FuzzHTTPCategory(f *testing.F) {
	for _, tc := range httpRoutes {
		f.Add(tc.path)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if got, want := HTTPCategory(p), tritonCategory(p); got != want {
			t.Fatalf("HTTPCategory(%q) = %v, Triton's routes: %v", p, got, want)
		}
	})
}

// Each of Triton's gRPC methods is in the category Triton checks for it.
func TestGRPCCategory(t *testing.T) {
	const svc = "/inference.GRPCInferenceService/"
	for method, want := range map[string]Category{
		svc + "ServerLive": HealthAPI, svc + "ModelReady": HealthAPI, "/grpc.health.v1.Health/Check": HealthAPI,
		svc + "ModelMetadata": MetadataAPI, svc + "ModelInfer": InferenceAPI, svc + "ModelStreamInfer": InferenceAPI,
		svc + "ModelConfig": ModelConfigAPI, svc + "ModelStatistics": StatisticsAPI,
		svc + "RepositoryModelUnload": ModelRepositoryAPI, svc + "RepositoryIndex": ModelRepositoryAPI,
		svc + "CudaSharedMemoryRegister": SharedMemoryAPI, svc + "TraceSetting": TraceAPI, svc + "LogSettings": LoggingAPI,
		svc + "SomethingNewer": NoCategory, "/xds.service.orca.v3.OpenRcaService/StreamCoreMetrics": NoCategory,
	} {
		if got := GRPCCategory(method); got != want {
			t.Errorf("GRPCCategory(%s) = %v, want %v", method, got, want)
		}
	}
}

func TestParseRules(t *testing.T) {
	r, err := ParseRules([]string{"model-repository,shared-memory:admin-key=s3cr=t:x", "logging, trace", "inference:Api-Key="})
	if err != nil {
		t.Fatal(err)
	}
	want := Rules{
		ModelRepositoryAPI: {Key: "admin-key", Value: "s3cr=t:x"},
		SharedMemoryAPI:    {Key: "admin-key", Value: "s3cr=t:x"},
		LoggingAPI:         {Closed: true},
		TraceAPI:           {Closed: true},
		InferenceAPI:       {Key: "Api-Key", Value: ""},
	}
	if r != want {
		t.Errorf("ParseRules = %+v, want %+v", r, want)
	}
	for _, bad := range [][]string{
		{"model-repo"},
		{"logging", "trace,logging:k=v"},
		{"trace:novalue"},
		{"trace:=v"},
		{"trace:a key=v"},
		{""},
	} {
		if _, err := ParseRules(bad); err == nil {
			t.Errorf("ParseRules(%q) accepted", bad)
		}
	}
	if r, err := ParseRules(nil); err != nil || r != (Rules{}) {
		t.Errorf("ParseRules(nil) = %v, %v; want every category open", r, err)
	}
}

// A closed category is closed, a keyed one open to its header only, the
// others open, whatever spelling of the path: Triton's answers (403 and
// its message; UNAVAILABLE over gRPC, the key prefixed as Triton's gRPC
// server prefixes it), checked against tritonserver 2.51 started with
// --http-restricted-api and --grpc-restricted-protocol.
func TestAccess(t *testing.T) {
	rules, err := ParseRules([]string{"model-repository,shared-memory:admin-key=secret", "logging,trace"})
	if err != nil {
		t.Fatal(err)
	}
	var a Access
	a.Set(rules)
	header := func(h http.Header) func(string) []byte {
		return func(k string) []byte {
			if v := h.Values(k); len(v) > 0 {
				return []byte(v[0])
			}
			return nil
		}
	}
	keyed := "This API is restricted, expecting header 'admin-key'"
	closed := "This API is restricted: closed to clients (restricted_api)"
	for _, tc := range []struct {
		path string
		h    http.Header
		want string // "" passes
	}{
		{"/v2/repository/models/simple/unload", nil, keyed},
		{"/v2/repository/models/simple/unload", http.Header{"Admin-Key": {"wrong"}}, keyed},
		{"/v2/repository/models/simple/unload", http.Header{"Admin-Key": {"secret"}}, ""},
		{"/v2/repository/models/simple/unload", http.Header{"Admin-Key": {"x", "secret"}}, keyed}, // the first value, as Triton
		{"/v2/systemsharedmemory/region/r/register", nil, keyed},
		{"/v2/logging", http.Header{"Admin-Key": {"secret"}}, closed},
		{"/v2/models/simple/trace/setting", nil, closed},
		{"/v2/models/simple/infer", nil, ""},
		{"/v2/health/ready", nil, ""},
		{"/v2/nothing", nil, ""},
		// Spellings Triton itself routes nowhere (404) but a server that
		// decodes and cleans paths would take to a closed route.
		{"/v2/models/x/../../repository/models/simple/unload", nil, keyed},
		{"/v2/repository/models/simple%2Funload", nil, keyed},
		{"/v2/%6Cogging", nil, closed},
		{"/v2//logging", nil, closed},
		{"/v2/./trace/setting", nil, closed},
		{"/v2/models/simple/../../logging", http.Header{"Admin-Key": {"secret"}}, closed},
	} {
		err := a.HTTP(tc.path, header(tc.h))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %v: refused: %v", tc.path, tc.h, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want || StatusCode(err) != http.StatusForbidden):
			t.Errorf("%s %v: %v (%d), want 403 %q", tc.path, tc.h, err, StatusCode(err), tc.want)
		}
	}

	const svc = "/inference.GRPCInferenceService/"
	gKeyed := "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"
	for _, tc := range []struct {
		method string
		md     metadata.MD
		want   string
	}{
		{svc + "RepositoryModelUnload", nil, gKeyed},
		{svc + "RepositoryModelUnload", metadata.Pairs("admin-key", "secret"), gKeyed}, // Triton's prefix is needed
		{svc + "RepositoryModelUnload", metadata.Pairs("triton-grpc-protocol-admin-key", "secret"), ""},
		{svc + "LogSettings", metadata.Pairs("triton-grpc-protocol-admin-key", "secret"), "This protocol is restricted: closed to clients (restricted_api)"},
		{svc + "ModelInfer", nil, ""},
		{"/grpc.health.v1.Health/Check", nil, ""},
	} {
		err := a.GRPC(tc.method, tc.md)
		st := status.Convert(err)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %v: refused: %v", tc.method, tc.md, err)
		case tc.want != "" && (st.Code() != codes.Unavailable || st.Message() != tc.want):
			t.Errorf("%s %v: %v, want UNAVAILABLE %q", tc.method, tc.md, err, tc.want)
		}
	}

	// Every category open again: nothing refused, and nothing checked.
	a.Set(Rules{})
	if a.load() != nil || a.HTTP("/v2/logging", header(nil)) != nil || a.GRPC(svc+"LogSettings", nil) != nil {
		t.Error("rules left in force after every category was opened")
	}
	var none *Access
	if none.HTTP("/v2/logging", header(nil)) != nil || none.GRPC(svc+"LogSettings", nil) != nil {
		t.Error("a nil Access refused a call")
	}
}

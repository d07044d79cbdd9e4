package door

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratebatch/ratebatch/kserve"
)

// Which of Triton's routes a client may reach through the doors is the
// operator's choice, made as Triton's own --http-restricted-api and
// --grpc-restricted-protocol make it: Triton's API falls into categories
// (Category), and each is open, closed, or open to calls that carry a
// header KEY with the value VALUE (Rule). One table maps HTTP routes and
// gRPC methods to categories (HTTPCategory, GRPCCategory), so a category
// closed is closed at both doors; a refused call gets Triton's answer to
// a restricted call (Access.HTTP, Access.GRPC) and reaches nothing.

// Category is one of Triton's API categories, as its restricted-API
// options name them.
type Category uint8

// Triton's categories, in the order of its RestrictedCategory.
const (
	HealthAPI Category = iota
	MetadataAPI
	InferenceAPI
	SharedMemoryAPI
	ModelConfigAPI
	ModelRepositoryAPI
	StatisticsAPI
	TraceAPI
	LoggingAPI
	// NoCategory is a path or method no category holds: none of
	// Triton's routes (Triton answers 404 / UNIMPLEMENTED), or one of a
	// newer Triton's; never restricted.
	NoCategory
)

var categoryNames = [NoCategory]string{"health", "metadata", "inference", "shared-memory", "model-config",
	"model-repository", "statistics", "trace", "logging"}

func (c Category) String() string {
	if c < NoCategory {
		return categoryNames[c]
	}
	return "none"
}

// Categories lists the categories' names, as the configuration spells
// them.
func Categories() []string { return categoryNames[:] }

// Rule is what a category lets through: every call (the zero Rule), none
// (Closed), or the calls whose header Key holds Value. Over gRPC the key
// is Triton's metadata key for it, "triton-grpc-protocol-" + Key.
type Rule struct {
	Closed     bool
	Key, Value string
}

// grpcKeyPrefix is the prefix Triton's gRPC server gives a restricted
// protocol's header (kRestrictedProtocolHeaderTemplate).
const grpcKeyPrefix = "triton-grpc-protocol-"

// Rules are the rules of every category.
type Rules [NoCategory]Rule

// ParseRules reads restricted_api's entries, each in Triton's form
// "CATEGORY[,CATEGORY...]:KEY=VALUE" (those categories open to calls with
// header KEY: VALUE), or "CATEGORY[,CATEGORY...]" (those closed to every
// client). Categories not named stay open. As Triton refuses them, an
// unknown category and a category named twice are errors.
func ParseRules(entries []string) (Rules, error) {
	var r Rules
	var named [NoCategory]bool
	for _, e := range entries {
		cats, setting, keyed := strings.Cut(e, ":")
		// An error names the entry by its categories and key: its value
		// is a secret.
		shown := cats
		rule := Rule{Closed: true}
		if keyed {
			k, v, ok := strings.Cut(setting, "=")
			if !ok || !validHeaderKey(k) {
				return Rules{}, fmt.Errorf("entry %q: want CATEGORY[,CATEGORY...]:KEY=VALUE (KEY a header name) or CATEGORY[,CATEGORY...] (closed)", cats+":...")
			}
			rule, shown = Rule{Key: k, Value: v}, cats+":"+k+"=..."
		}
		for _, name := range strings.Split(cats, ",") {
			c := categoryOf(strings.TrimSpace(name))
			switch {
			case c == NoCategory && strings.Contains(name, "="):
				return Rules{}, errors.New("an entry KEY=VALUE without its categories: want CATEGORY[,CATEGORY...]:KEY=VALUE")
			case c == NoCategory:
				return Rules{}, fmt.Errorf("entry %q: unknown category %q (known: %s)", shown, name, strings.Join(Categories(), ", "))
			case named[c]:
				return Rules{}, fmt.Errorf("entry %q: category %s can not be in two entries", shown, c)
			}
			named[c], r[c] = true, rule
		}
	}
	return r, nil
}

func categoryOf(name string) Category {
	for c, n := range categoryNames {
		if n == name {
			return Category(c)
		}
	}
	return NoCategory
}

// validHeaderKey reports whether k is an HTTP header name (RFC 9110
// token) that is also a gRPC metadata key once lowercased.
func validHeaderKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i] | 0x20 // lower case for letters
		if !(c >= 'a' && c <= 'z' || k[i] >= '0' && k[i] <= '9' || k[i] == '-' || k[i] == '_' || k[i] == '.') {
			return false
		}
	}
	return true
}

// Access holds the rules in force, which both doors read and a reload
// replaces (Set). The zero Access, and a nil one, let everything through.
type Access struct {
	rules atomic.Pointer[Rules] // nil: every category open
}

// Set puts r in force.
func (a *Access) Set(r Rules) {
	if r == (Rules{}) {
		a.rules.Store(nil) // the doors skip the check
		return
	}
	a.rules.Store(&r)
}

// Active reports whether any category is restricted: a door checks
// nothing otherwise.
func (a *Access) Active() bool { return a.load() != nil }

func (a *Access) load() *Rules {
	if a == nil {
		return nil
	}
	return a.rules.Load()
}

// HTTP checks a request of the HTTP data port against the rules: nil when
// it may pass, else the answer to give it. path is the request's path as
// sent; header looks a request header up (its first value, nil when
// absent). The answer is Triton's: 403 with a KServe v2 error. Both the path as Triton reads it (undecoded) and the path as a
// server or balancer between the proxy and Triton might read it (decoded,
// its dot segments resolved) are checked, so that no spelling of a closed
// route passes.
func (a *Access) HTTP(p string, header func(key string) []byte) error {
	r := a.load()
	if r == nil {
		return nil
	}
	if err := r.http(HTTPCategory(p), header); err != nil {
		return err
	}
	if strings.Contains(p, "%") || strings.Contains(p, "/.") || strings.Contains(p, "//") {
		return r.http(HTTPCategory(cleanPath(p)), header)
	}
	return nil
}

func (r *Rules) http(c Category, header func(string) []byte) error {
	if c == NoCategory {
		return nil
	}
	switch rule := r[c]; {
	case rule.Closed:
		return &kserve.Error{Status: http.StatusForbidden, Msg: "This API is restricted: closed to clients (restricted_api)"}
	case rule.Key != "" && string(header(rule.Key)) != rule.Value:
		return &kserve.Error{Status: http.StatusForbidden, Msg: "This API is restricted, expecting header '" + rule.Key + "'"}
	}
	return nil
}

// cleanPath is p as a server that decodes a path and resolves its dot
// segments would read it.
func cleanPath(p string) string {
	if d, err := url.PathUnescape(p); err == nil {
		p = d
	}
	return path.Clean("/" + p)
}

// GRPC checks a call of the gRPC door, of the method named (its full
// name, /package.Service/Method), against the rules: nil when it may
// pass, else the status to end it with, Triton's (UNAVAILABLE). md is
// the call's metadata.
func (a *Access) GRPC(method string, md metadata.MD) error {
	r := a.load()
	if r == nil {
		return nil
	}
	c := GRPCCategory(method)
	if c == NoCategory {
		return nil
	}
	switch rule := r[c]; {
	case rule.Closed:
		return status.Error(codes.Unavailable, "This protocol is restricted: closed to clients (restricted_api)")
	case rule.Key != "":
		key := grpcKeyPrefix + strings.ToLower(rule.Key)
		if v := md.Get(key); len(v) == 0 || v[0] != rule.Value {
			return status.Error(codes.Unavailable, "This protocol is restricted, expecting header '"+key+"'")
		}
	}
	return nil
}

// HTTPCategory is the category of the route Triton's HTTP server takes
// path to (its path as sent, which Triton matches undecoded against its
// route table: HTTPAPIServer::Handle); NoCategory for a path none of its
// routes takes. It reads the path as Triton's regular expressions do,
// without them: the data port classifies every request.
func HTTPCategory(p string) Category {
	switch p {
	case "/v2/models/stats":
		return StatisticsAPI
	case "/v2/logging":
		return LoggingAPI
	case "/v2":
		return MetadataAPI
	case "/v2/health/live", "/v2/health/ready":
		return HealthAPI
	case "/v2/trace/setting":
		return TraceAPI
	}
	if rest, ok := strings.CutPrefix(p, "/v2/models/"); ok {
		return modelRoute(rest)
	}
	if rest, ok := strings.CutPrefix(p, "/v2/systemsharedmemory"); ok && regionRoute(rest) {
		return SharedMemoryAPI
	}
	if rest, ok := strings.CutPrefix(p, "/v2/cudasharedmemory"); ok && regionRoute(rest) {
		return SharedMemoryAPI
	}
	if rest, ok := strings.CutPrefix(p, "/v2/repository"); ok && repositoryRoute(rest) {
		return ModelRepositoryAPI
	}
	return NoCategory
}

// modelRoute reads what follows /v2/models/ as Triton's
// /v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|generate|
// generate_stream|ready|config|stats|trace/setting))? does.
func modelRoute(rest string) Category {
	i := strings.IndexByte(rest, '/')
	switch {
	case rest == "" || i == 0:
		return NoCategory
	case i < 0:
		return MetadataAPI
	}
	tail, versioned := rest[i:], false
	if v, ok := strings.CutPrefix(tail, "/versions/"); ok {
		digits, _, slash := strings.Cut(v, "/")
		if !PathVersion(digits) {
			return NoCategory
		}
		if !slash {
			return MetadataAPI
		}
		tail, versioned = v[len(digits):], true
	}
	switch tail {
	case "/ready":
		return HealthAPI
	case "/infer", "/generate", "/generate_stream":
		return InferenceAPI
	case "/config":
		return ModelConfigAPI
	case "/stats":
		return StatisticsAPI
	case "/trace/setting":
		if !versioned { // Triton answers a version's trace setting 400
			return TraceAPI
		}
	}
	return NoCategory
}

// regionRoute reads what follows /v2/systemsharedmemory (or
// /v2/cudasharedmemory) as (?:/region/([^/]+))?/(status|register|unregister).
func regionRoute(rest string) bool {
	if r, ok := strings.CutPrefix(rest, "/region/"); ok {
		if i := strings.IndexByte(r, '/'); i > 0 && regionAction(r[i:]) {
			return true
		}
	}
	return regionAction(rest)
}

func regionAction(s string) bool { return s == "/status" || s == "/register" || s == "/unregister" }

// repositoryRoute reads what follows /v2/repository as
// (?:/([^/]+))?/(index|models/([^/]+)/(load|unload)).
func repositoryRoute(rest string) bool {
	if repositoryAction(rest) {
		return true
	}
	if r, ok := strings.CutPrefix(rest, "/"); ok {
		if i := strings.IndexByte(r, '/'); i > 0 {
			return repositoryAction(r[i:])
		}
	}
	return false
}

func repositoryAction(s string) bool {
	if s == "/index" {
		return true
	}
	m, ok := strings.CutPrefix(s, "/models/")
	if !ok {
		return false
	}
	i := strings.IndexByte(m, '/')
	return i > 0 && (m[i:] == "/load" || m[i:] == "/unload")
}

// grpcCategories are the categories of Triton's gRPC methods
// (grpc_server.cc) and of the gRPC health check, which Triton counts as
// health and the proxy answers itself.
var grpcCategories = map[string]Category{
	"/inference.GRPCInferenceService/ServerLive":                   HealthAPI,
	"/inference.GRPCInferenceService/ServerReady":                  HealthAPI,
	"/inference.GRPCInferenceService/ModelReady":                   HealthAPI,
	"/grpc.health.v1.Health/Check":                                 HealthAPI,
	"/grpc.health.v1.Health/Watch":                                 HealthAPI,
	"/inference.GRPCInferenceService/ServerMetadata":               MetadataAPI,
	"/inference.GRPCInferenceService/ModelMetadata":                MetadataAPI,
	"/inference.GRPCInferenceService/ModelInfer":                   InferenceAPI,
	"/inference.GRPCInferenceService/ModelStreamInfer":             InferenceAPI,
	"/inference.GRPCInferenceService/ModelConfig":                  ModelConfigAPI,
	"/inference.GRPCInferenceService/ModelStatistics":              StatisticsAPI,
	"/inference.GRPCInferenceService/RepositoryIndex":              ModelRepositoryAPI,
	"/inference.GRPCInferenceService/RepositoryModelLoad":          ModelRepositoryAPI,
	"/inference.GRPCInferenceService/RepositoryModelUnload":        ModelRepositoryAPI,
	"/inference.GRPCInferenceService/SystemSharedMemoryStatus":     SharedMemoryAPI,
	"/inference.GRPCInferenceService/SystemSharedMemoryRegister":   SharedMemoryAPI,
	"/inference.GRPCInferenceService/SystemSharedMemoryUnregister": SharedMemoryAPI,
	"/inference.GRPCInferenceService/CudaSharedMemoryStatus":       SharedMemoryAPI,
	"/inference.GRPCInferenceService/CudaSharedMemoryRegister":     SharedMemoryAPI,
	"/inference.GRPCInferenceService/CudaSharedMemoryUnregister":   SharedMemoryAPI,
	"/inference.GRPCInferenceService/TraceSetting":                 TraceAPI,
	"/inference.GRPCInferenceService/LogSettings":                  LoggingAPI,
}

// GRPCCategory is the category of a gRPC method (its full name);
// NoCategory for any other (the proxy's ORCA stream, a newer Triton's).
func GRPCCategory(method string) Category {
	if c, ok := grpcCategories[method]; ok {
		return c
	}
	return NoCategory
}

package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratebatch/ratebatch/kserve"
)

// routes maps Triton's HTTP paths (KServe v2 plus Triton's extensions) to
// handlers. Every path that names a model has a /versions/{version} twin.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(method, path string, h http.HandlerFunc) { mux.HandleFunc(method+" "+path, h) }
	handle("GET", "/v2", s.handleServerMetadata)
	handle("GET", "/v2/health/live", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	handle("GET", "/v2/health/ready", s.handleServerReady)
	handle("GET", "/v2/models/stats", s.handleStats)
	handle("POST", "/v2/repository/index", s.handleRepositoryIndex)
	handle("POST", "/v2/repository/models/{model}/load", s.handleLoad(true))
	handle("POST", "/v2/repository/models/{model}/unload", s.handleLoad(false))
	for _, prefix := range []string{"/v2/models/{model}", "/v2/models/{model}/versions/{version}"} {
		handle("GET", prefix, s.withModel(s.handleModelMetadata))
		handle("GET", prefix+"/ready", s.withModel(s.handleModelReady))
		handle("GET", prefix+"/config", s.withModel(s.handleModelConfig))
		handle("GET", prefix+"/stats", s.withModel(s.handleModelStats))
		handle("POST", prefix+"/infer", s.withModel(s.handleInfer))
	}
	handle("GET", "/emulator/models/{model}", s.withModel(s.handleTruth))
	// Everything else gets a KServe error body: 405 when the path exists
	// for another method, 404 otherwise.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			other := r.Clone(r.Context())
			other.Method = method
			if _, pattern := mux.Handler(other); method != r.Method && pattern != "/" {
				w.Header().Set("Allow", method)
				kserve.WriteError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: method not allowed, use %s", r.Method, r.URL.Path, method))
				return
			}
		}
		kserve.WriteError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s %s on this server", r.Method, r.URL.Path))
	})
	return mux
}

func (s *Server) metricsRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return mux
}

// unknownModel is Triton's wording for a model (version) it does not serve.
func unknownModel(name, version string) string {
	if version != "" {
		return fmt.Sprintf("Request for unknown model: '%s' version %s is not found", name, version)
	}
	return fmt.Sprintf("Request for unknown model: '%s' is not found", name)
}

// withModel resolves {model} and the optional {version}, answering 404 for
// a model or version the server does not have.
func (s *Server) withModel(h func(http.ResponseWriter, *http.Request, *model)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, version := r.PathValue("model"), r.PathValue("version")
		m, ok := s.byName[name]
		if !ok || (version != "" && version != modelVersion) {
			kserve.WriteError(w, http.StatusNotFound, unknownModel(name, version))
			return
		}
		h(w, r, m)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		kserve.WriteError(w, http.StatusInternalServerError, "encoding the response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

func (s *Server) handleServerMetadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, kserve.ServerMetadata{Name: serverName, Version: serverVersion, Extensions: extensions})
}

// handleServerReady answers 200 when ready and 400 otherwise, as Triton does.
func (s *Server) handleServerReady(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleModelReady(w http.ResponseWriter, _ *http.Request, m *model) {
	if !m.ready.Load() {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleModelMetadata(w http.ResponseWriter, _ *http.Request, m *model) {
	writeJSON(w, m.metadata())
}

func (s *Server) handleModelConfig(w http.ResponseWriter, _ *http.Request, m *model) {
	writeJSON(w, m.config())
}

func (s *Server) handleModelStats(w http.ResponseWriter, _ *http.Request, m *model) {
	writeJSON(w, StatsResponse{ModelStats: []ModelStats{m.stats.snapshot()}})
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	resp := StatsResponse{ModelStats: make([]ModelStats, 0, len(s.models))}
	for _, m := range s.models {
		resp.ModelStats = append(resp.ModelStats, m.stats.snapshot())
	}
	writeJSON(w, resp)
}

// handleRepositoryIndex lists every model with its state. Triton accepts a
// body {"ready": true} to list only ready models; so does the emulator.
func (s *Server) handleRepositoryIndex(w http.ResponseWriter, r *http.Request) {
	var filter struct {
		Ready bool `json:"ready"`
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		kserve.WriteError(w, http.StatusBadRequest, "repository index: reading the body: "+err.Error())
		return
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &filter); err != nil {
			kserve.WriteError(w, http.StatusBadRequest, "repository index: body must be a JSON object like {\"ready\": true}: "+err.Error())
			return
		}
	}
	writeJSON(w, s.index(filter.Ready))
}

// index lists every model with its state, or only the ready ones.
func (s *Server) index(readyOnly bool) []kserve.IndexEntry {
	entries := make([]kserve.IndexEntry, 0, len(s.models))
	for _, m := range s.models {
		e := kserve.IndexEntry{Name: m.name, Version: modelVersion, State: "READY"}
		if !m.ready.Load() {
			if readyOnly {
				continue
			}
			e.State, e.Reason = "UNAVAILABLE", "unloaded"
		}
		entries = append(entries, e)
	}
	return entries
}

func (s *Server) handleLoad(ready bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("model")
		if err := s.SetModelReady(name, ready); err != nil {
			kserve.WriteError(w, http.StatusBadRequest, fmt.Sprintf("failed to load '%s', failed to poll from model repository", name))
			return
		}
		w.WriteHeader(http.StatusOK)
	}
}

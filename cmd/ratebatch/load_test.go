package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ratebatch/ratebatch/lab/emulator"
)

// emulatorURL serves the GPU emulator (instant batches) on loopback.
func emulatorURL(t *testing.T, fault emulator.FaultFunc) string {
	t.Helper()
	em, err := emulator.New(emulator.Options{TimeScale: 0, Instances: 4, Fault: fault})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(em.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// loadJSON is the --json output: the contract keys and the account.
type loadJSON struct {
	Sent             *int64           `json:"sent"`
	OK               *int64           `json:"ok"`
	Errors           *int64           `json:"errors"`
	ThroughputRPS    *float64         `json:"throughput_rps"`
	MeanLatencyMs    *float64         `json:"mean_latency_ms"`
	P50LatencyMs     *float64         `json:"p50_latency_ms"`
	P99LatencyMs     *float64         `json:"p99_latency_ms"`
	Scheduled        int64            `json:"scheduled"`
	Dropped          int64            `json:"dropped_by_client"`
	StatusCounts     map[string]int64 `json:"status_counts"`
	ErrorsByKind     map[string]int64 `json:"errors_by_kind"`
	FirstVerifyError string           `json:"first_verify_error"`
	Warmup           *struct {
		Sent int64 `json:"sent"`
		OK   int64 `json:"ok"`
	} `json:"warmup"`
}

func runLoadJSON(t *testing.T, args ...string) (loadJSON, int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"load", "--json"}, args...), &out, &errb)
	var got loadJSON
	if code == 0 || out.Len() > 0 {
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("--json output %q: %v (stderr %q)", out.String(), err, errb.String())
		}
	}
	return got, code, errb.String()
}

// Against the emulator's simple model, in both wire forms, every answer
// verifies and the JSON carries the contract keys.
func TestLoadAgainstEmulator(t *testing.T) {
	url := emulatorURL(t, nil)
	for _, form := range [][]string{nil, {"--binary"}, {"--binary", "--rows", "3"}, {"--warmup", "200ms"}} {
		t.Run(strings.Join(form, " "), func(t *testing.T) {
			args := append([]string{"--target", url, "--model", "simple", "--rate", "300", "--duration", "300ms", "--verify"}, form...)
			got, code, stderr := runLoadJSON(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if got.Sent == nil || got.OK == nil || got.Errors == nil || got.ThroughputRPS == nil ||
				got.MeanLatencyMs == nil || got.P50LatencyMs == nil || got.P99LatencyMs == nil {
				t.Fatalf("a contract key is missing: %+v", got)
			}
			if *got.Sent == 0 || *got.OK != *got.Sent || *got.Errors != 0 || got.Scheduled != *got.Sent+got.Dropped {
				t.Fatalf("account sent %d ok %d errors %d scheduled %d dropped %d (%s)",
					*got.Sent, *got.OK, *got.Errors, got.Scheduled, got.Dropped, got.FirstVerifyError)
			}
			if *got.P50LatencyMs <= 0 || *got.P99LatencyMs < *got.P50LatencyMs || *got.ThroughputRPS <= 0 {
				t.Fatalf("p50 %v p99 %v throughput %v", *got.P50LatencyMs, *got.P99LatencyMs, *got.ThroughputRPS)
			}
			// A warm-up is accounted for apart, and only when asked for.
			if warm := slices.Contains(form, "--warmup"); (got.Warmup != nil) != warm || warm && (got.Warmup.Sent < 20 || got.Warmup.OK != got.Warmup.Sent) {
				t.Fatalf("warm-up asked for: %v; accounted: %+v", warm, got.Warmup)
			}
		})
	}
}

// Failed batches come back as 503s: counted, by status and by kind, and
// written to the CSV, one line per request.
func TestLoadCountsFailuresAndWritesCSV(t *testing.T) {
	url := emulatorURL(t, func(b emulator.BatchInfo) emulator.Fault {
		if b.Seq%3 == 0 {
			return emulator.Fault{Status: 503, Message: "injected"}
		}
		return emulator.Fault{}
	})
	csvPath := filepath.Join(t.TempDir(), "requests.csv")
	got, code, stderr := runLoadJSON(t, "--target", url, "--model", "simple", "--rate", "300", "--duration", "300ms",
		"--csv", csvPath)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got.StatusCounts["503"] == 0 || got.ErrorsByKind["http_status"] != got.StatusCounts["503"] ||
		*got.Errors != got.StatusCounts["503"] || *got.OK+*got.Errors != *got.Sent {
		t.Fatalf("status %v, errors %v by kind %v, ok %d sent %d", got.StatusCounts, *got.Errors, got.ErrorsByKind, *got.OK, *got.Sent)
	}
	data, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if lines[0] != "start_ms,latency_ms,status,error" || int64(len(lines)-1) != got.Scheduled {
		t.Fatalf("CSV has %d lines after %q for %d requests", len(lines)-1, lines[0], got.Scheduled)
	}
	if n := strings.Count(string(data), ",503,http_status\n"); int64(n) != got.StatusCounts["503"] {
		t.Fatalf("CSV has %d 503 lines, summary %d", n, got.StatusCounts["503"])
	}
}

// A proxy that answers some callers with another caller's result fails
// --verify: the mismatches are counted and the command exits 1.
func TestLoadVerifyCatchesMixedCallers(t *testing.T) {
	em, err := emulator.New(emulator.Options{Instances: 4})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var n int
	var previous []byte
	mixer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			n++
			if n%4 == 0 && previous != nil { // serve the previous caller's request instead
				body, previous = previous, body
			} else {
				previous = body
			}
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		em.Handler().ServeHTTP(w, r)
	}))
	defer mixer.Close()
	got, code, stderr := runLoadJSON(t, "--target", mixer.URL, "--model", "simple", "--rate", "200", "--duration", "300ms",
		"--verify", "--max-inflight", "1", "--on-full", "wait")
	if code != 1 || !strings.Contains(stderr, "failed verification") {
		t.Fatalf("exit %d, stderr %q; want 1 and a verification failure", code, stderr)
	}
	if got.ErrorsByKind["mismatch"] == 0 || got.FirstVerifyError == "" || *got.OK+*got.Errors != *got.Sent {
		t.Fatalf("errors by kind %v, first %q, ok %d errors %d sent %d", got.ErrorsByKind, got.FirstVerifyError, *got.OK, *got.Errors, *got.Sent)
	}
}

// A trace sets the duration and the rate; the text summary names it.
func TestLoadTraceText(t *testing.T) {
	url := emulatorURL(t, nil)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"load", "--target", url, "--model", "simple", "--trace", "paper300",
		"--speedup", "600", "--trace-scale", "2"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"trace paper300*2/600", "for 500ms", "scheduled ", "latency ms (ok answers): mean "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestLoadUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--model", "m", "--rate", "1", "--duration", "1s"}, "--target"},
		{[]string{"--target", "http://127.0.0.1:1", "--rate", "1", "--duration", "1s"}, "--model"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--duration", "1s"}, "--rate RPS or --trace"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--trace", "paper300"}, "only one of"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1"}, "give --duration"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "-5", "--duration", "1s"}, "--rate must be > 0"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--trace", "nope"}, `unknown trace "nope"`},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--trace", "paper300", "--speedup", "0"}, "--speedup"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--duration", "1s", "--speedup", "2"}, "need --trace"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--duration", "1s", "--on-full", "queue"}, "--on-full must be"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--duration", "1s", "--rows", "0"}, "--rows"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--duration", "1s", "--warmup", "-1s"}, "--warmup must be >= 0"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--trace", "paper300", "--find-rate-p99", "15ms"}, "--find-rate-p99 needs"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--duration", "1s", "--find-rate-p99", "0s"}, "--find-rate-p99 needs"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"load"}, tt.args...), &out, &errb)
			if code != 2 || !strings.Contains(errb.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errb.String(), tt.want)
			}
		})
	}
}

// A server that is not there is a run error (exit 1) naming the metadata
// request, not a panic or a silent zero summary.
func TestLoadUnreachableTarget(t *testing.T) {
	var out, errb bytes.Buffer
	srv := httptest.NewServer(nil)
	url := srv.URL
	srv.Close()
	code := run(context.Background(), []string{"load", "--target", url, "--model", "simple", "--rate", "10", "--duration", "1s"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "model metadata") {
		t.Fatalf("exit %d, stderr %q; want 1 and a metadata error", code, errb.String())
	}
}

// --cpuprofile leaves a CPU profile of the run that pprof can read.
func TestLoadCPUProfile(t *testing.T) {
	base := emulatorURL(t, nil)
	path := filepath.Join(t.TempDir(), "load.cpu")
	got, code, stderr := runLoadJSON(t, "--target", base, "--model", "simple", "--rate", "500", "--duration", "300ms", "--cpuprofile", path)
	if code != 0 || got.OK == nil || *got.OK == 0 {
		t.Fatalf("exit %d, ok %v: %s", code, got.OK, stderr)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A CPU profile is a gzip-compressed protocol buffer.
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("--cpuprofile did not write a gzip-compressed profile: %v", err)
	}
	if b, err := io.ReadAll(zr); err != nil || len(b) == 0 {
		t.Fatalf("--cpuprofile: %d bytes of profile, %v", len(b), err)
	}
}

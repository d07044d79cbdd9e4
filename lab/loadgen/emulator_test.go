package loadgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/lab/loadgen"
)

// The load command's runs against the GPU emulator, through the API it
// calls: Command and Arrivals complete the Config, Run sends, WriteJSON and
// WriteText report.

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

// loadJSON is WriteJSON's output: the contract keys and the account.
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

// command is a load run as the command's flags give it: its defaults,
// then edit (the flags given), then Command and Arrivals.
type command struct {
	c                loadgen.Config
	protocol, onFull string
	arr              loadgen.Arrivals
}

func newCommand(target string, rate float64, duration time.Duration) *command {
	cmd := &command{protocol: "http", onFull: "drop",
		c: loadgen.Config{Target: target, Model: "simple", Seed: 1, Rows: 1, Timeout: 10 * time.Second, MaxInFlight: 1024}}
	if rate > 0 {
		cmd.arr.Rate = &rate
	}
	if duration > 0 {
		cmd.c.Duration, cmd.arr.DurationGiven = duration, true
	}
	return cmd
}

// run completes the config and runs it; it returns the result and the
// load's description.
func (cmd *command) run(t *testing.T) (loadgen.Result, string, error) {
	t.Helper()
	if err := loadgen.Command(&cmd.c, cmd.protocol, cmd.onFull, cmd.arr.DurationGiven); err != nil {
		t.Fatal(err)
	}
	load, err := cmd.arr.Apply(&cmd.c)
	if err != nil {
		t.Fatal(err)
	}
	res, err := loadgen.Run(context.Background(), cmd.c)
	return res, load, err
}

// runJSON runs cmd and reads its summary back from WriteJSON.
func (cmd *command) runJSON(t *testing.T) (loadJSON, loadgen.Result) {
	t.Helper()
	res, _, err := cmd.run(t)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := res.WriteJSON(&out, cmd.c.Warmup > 0); err != nil {
		t.Fatal(err)
	}
	var got loadJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("JSON summary %q: %v", out.String(), err)
	}
	return got, res
}

// Against the emulator's simple model, in both wire forms, every answer
// verifies and the JSON carries the contract keys.
func TestLoadAgainstEmulator(t *testing.T) {
	url := emulatorURL(t, nil)
	tests := []struct {
		name   string
		edit   func(*loadgen.Config)
		warmup bool
	}{
		{"json", func(*loadgen.Config) {}, false},
		{"binary", func(c *loadgen.Config) { c.Binary = true }, false},
		{"binary 3 rows", func(c *loadgen.Config) { c.Binary, c.Rows = true, 3 }, false},
		{"warmup", func(c *loadgen.Config) { c.Warmup = 200 * time.Millisecond }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := newCommand(url, 300, 300*time.Millisecond)
			cmd.c.Verify = true
			tt.edit(&cmd.c)
			got, _ := cmd.runJSON(t)
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
			if warm := tt.warmup; (got.Warmup != nil) != warm || warm && (got.Warmup.Sent < 20 || got.Warmup.OK != got.Warmup.Sent) {
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
	got, res := newCommand(url, 300, 300*time.Millisecond).runJSON(t)
	if got.StatusCounts["503"] == 0 || got.ErrorsByKind["http_status"] != got.StatusCounts["503"] ||
		*got.Errors != got.StatusCounts["503"] || *got.OK+*got.Errors != *got.Sent {
		t.Fatalf("status %v, errors %v by kind %v, ok %d sent %d", got.StatusCounts, *got.Errors, got.ErrorsByKind, *got.OK, *got.Sent)
	}
	csvPath := filepath.Join(t.TempDir(), "requests.csv")
	f, err := os.Create(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := loadgen.WriteCSV(f, res.Records); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
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

// mixCallers serves em but answers every fourth request with the previous
// caller's result, as a proxy that splits a batch's outputs wrongly would.
func mixCallers(em *emulator.Server) http.Handler {
	var mu sync.Mutex
	var n int
	var previous []byte
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	})
}

// miscount serves em but adds one to every element of OUTPUT0 of every
// JSON answer: its own caller's, with a wrong sum.
func miscount(em *emulator.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			em.Handler().ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		em.Handler().ServeHTTP(rec, r)
		var resp map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		outputs, _ := resp["outputs"].([]any)
		for _, o := range outputs {
			if o := o.(map[string]any); o["name"] == "OUTPUT0" {
				for i, v := range o["data"].([]any) {
					o["data"].([]any)[i] = v.(float64) + 1
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(resp)
	})
}

// A run with Verify fails (Result.Verified, which `ratebatch load --verify`
// returns, so the command exits non-zero) when any answer does not match
// its own inputs, and passes when every answer does; the mismatches are
// counted and the first is kept.
func TestLoadVerifyFailsTheRun(t *testing.T) {
	em, err := emulator.New(emulator.Options{Instances: 4})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		h            http.Handler
		wrong, every bool // some answers are wrong; every one is
	}{
		{"the emulator's right answers", em.Handler(), false, false},
		{"wrong sums", miscount(em), true, true},
		{"another caller's answers", mixCallers(em), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.h)
			defer srv.Close()
			cmd := newCommand(srv.URL, 200, 300*time.Millisecond)
			cmd.c.Verify, cmd.c.MaxInFlight, cmd.onFull = true, 1, "wait"
			got, res := cmd.runJSON(t)
			if *got.Sent == 0 || *got.OK+*got.Errors != *got.Sent {
				t.Fatalf("ok %d errors %d sent %d", *got.OK, *got.Errors, *got.Sent)
			}
			err := res.Verified()
			if !tt.wrong {
				if err != nil || *got.OK != *got.Sent || got.FirstVerifyError != "" {
					t.Fatalf("right answers: Verified() = %v, ok %d of %d, first %q", err, *got.OK, *got.Sent, got.FirstVerifyError)
				}
				return
			}
			if !errors.Is(err, loadgen.ErrUnverified) || !strings.Contains(err.Error(), got.FirstVerifyError) {
				t.Fatalf("wrong answers: Verified() = %v, want ErrUnverified naming the first (%q)", err, got.FirstVerifyError)
			}
			if n := got.ErrorsByKind["mismatch"]; n == 0 || tt.every && n != *got.Sent || got.FirstVerifyError == "" {
				t.Fatalf("errors by kind %v of %d sent, first %q", got.ErrorsByKind, *got.Sent, got.FirstVerifyError)
			}
		})
	}
}

// A trace sets the duration and the rate; the text summary names it.
func TestLoadTraceText(t *testing.T) {
	url := emulatorURL(t, nil)
	cmd := newCommand(url, 0, 0)
	speedup, scale := 600.0, 2.0
	cmd.arr.Trace, cmd.arr.Speedup, cmd.arr.Scale = "paper300", &speedup, &scale
	res, load, err := cmd.run(t)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res.WriteText(&out, cmd.c, load)
	for _, want := range []string{"trace paper300*2/600", "for 500ms", "scheduled ", "latency ms (ok answers): mean "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// The text summary says which protocol's statuses it counts, and with
// Verify says when every answer checked out.
func TestLoadTextSaysProtocolAndVerdict(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 0})
	addr, stop, err := em.ServeGRPC("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(time.Second) })
	tests := []struct {
		target, protocol string
		want, not        string
	}{
		{"http://" + em.Addr(), "http", "HTTP status (200 ", "gRPC"},
		{addr, "grpc", "gRPC status (OK ", "HTTP status"},
	}
	for _, tt := range tests {
		cmd := newCommand(tt.target, 200, 200*time.Millisecond)
		cmd.protocol, cmd.c.Verify = tt.protocol, true
		res, load, err := cmd.run(t)
		if err != nil {
			t.Fatalf("%s: %v", tt.protocol, err)
		}
		var out bytes.Buffer
		res.WriteText(&out, cmd.c, load)
		text := out.String()
		if !strings.Contains(text, tt.want) || strings.Contains(text, tt.not) || !regexp.MustCompile(`verify: all [1-9]\d* answers verified`).MatchString(text) {
			t.Errorf("%s: summary\n%s\nwant %q, no %q, and the verification verdict", tt.protocol, text, tt.want, tt.not)
		}
	}
}

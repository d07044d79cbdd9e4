package emulator

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
)

func TestFaults(t *testing.T) {
	p, _ := preset.Lookup(preset.DefaultPreset)
	tests := []struct {
		name       string
		fault      Fault
		wantStatus int // 0: the connection fails
		wantMsg    string
		wantOK     bool
	}{
		{"internal error", Fault{Status: 500, Message: "CUDA error: an illegal memory access"}, 500, "illegal memory access", false},
		{"bad request", Fault{Status: 400, Message: "rejected by the model"}, 400, "rejected", false},
		{"unavailable after a delay", Fault{Delay: 30 * time.Millisecond, Status: 503, Message: "busy"}, 503, "busy", false},
		{"slow device", Fault{Delay: 40 * time.Millisecond}, 200, "", true},
		{"status that is no error", Fault{Status: 200, Message: "oops"}, 500, "not an HTTP error status", false},
		{"dropped connection", Fault{Drop: true}, 0, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			s, ts := newTestServer(t, Options{Profile: p, TimeScale: 1, Clock: clock,
				Fault: func(BatchInfo) Fault { return tt.fault }})
			body := requestFor(t, SimpleModel, 2, 0)
			before := clock.Now()
			resp, err := http.Post(ts.URL+"/v2/models/simple/infer", "application/json", bytes.NewReader(body))
			if tt.wantStatus == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("got status %d, want a failed connection", resp.StatusCode)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				r := parseResponse(t, resp)
				resp.Body.Close()
				if r.status != tt.wantStatus || !strings.Contains(r.errMsg, tt.wantMsg) {
					t.Fatalf("got %d %q, want %d with %q", r.status, r.errMsg, tt.wantStatus, tt.wantMsg)
				}
			}
			st, _ := s.Stats(SimpleModel)
			if tt.wantOK {
				exec := wantExec(p, 2, 1)
				if st.ExecutionCount != 1 || st.InferenceStats.ComputeInfer.NS != uint64(exec) {
					t.Errorf("stats %+v, want one execution of %v", st, exec)
				}
				if got := clock.Now().Sub(before); got != tt.fault.Delay+exec {
					t.Errorf("the request took %v of the clock, want delay %v + tau(2) %v", got, tt.fault.Delay, exec)
				}
				return
			}
			waitFor(t, func() bool { st, _ := s.Stats(SimpleModel); return st.InferenceStats.Fail.Count == 1 }, "the failure to be counted")
			if st, _ := s.Stats(SimpleModel); st.ExecutionCount != 0 || st.InferenceStats.Success.Count != 0 {
				t.Errorf("a faulted batch counted as executed: %+v", st)
			}
		})
	}
}

func TestFaultSeesEachBatch(t *testing.T) {
	var mu sync.Mutex
	var seen []BatchInfo
	_, ts := newTestServer(t, Options{Fault: func(b BatchInfo) Fault {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, b)
		if b.Seq == 2 {
			return Fault{Status: 500, Message: "second batch fails"}
		}
		return Fault{}
	}})
	var statuses []int
	for _, rows := range []int{1, 2, 3} {
		statuses = append(statuses, post(t, ts.URL+"/v2/models/simple/infer", requestFor(t, SimpleModel, rows, rows), -1).status)
	}
	statuses = append(statuses, post(t, ts.URL+"/v2/models/simple_nobatch/infer", requestFor(t, NoBatchModel, 1, 0), -1).status)
	if want := []int{200, 500, 200, 200}; !slices.Equal(statuses, want) {
		t.Errorf("statuses %v, want %v", statuses, want)
	}
	want := []BatchInfo{
		{Model: "simple", Rows: 1, Seq: 1, RequestID: "req-1"},
		{Model: "simple", Rows: 2, Seq: 2, RequestID: "req-1"},
		{Model: "simple", Rows: 3, Seq: 3, RequestID: "req-1"},
		{Model: "simple_nobatch", Rows: 1, Seq: 4, RequestID: "req-1"},
	}
	if !slices.Equal(seen, want) {
		t.Errorf("fault hook saw %+v, want %+v", seen, want)
	}
}

// TestQueueBehindBusyInstances holds both instances of "simple" in the
// fault hook (which runs while the batch holds its instance): a third
// request must wait, and be reported pending, until one is released.
func TestQueueBehindBusyInstances(t *testing.T) {
	gate := make(chan struct{})
	var entered atomic.Int32
	s, ts := newTestServer(t, Options{Instances: 2, Fault: func(BatchInfo) Fault {
		entered.Add(1)
		<-gate
		return Fault{}
	}})
	var wg sync.WaitGroup
	statuses := make(chan int, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses <- post(t, ts.URL+"/v2/models/simple/infer", requestFor(t, SimpleModel, 1, i), -1).status
		}()
	}
	waitFor(t, func() bool { return entered.Load() == 2 && s.byName[SimpleModel].pool.queued() == 1 }, "two batches running and one queued")
	if got, _ := value(t, gather(t, s), "nv_inference_pending_request_count", map[string]string{"model": "simple"}); got != 1 {
		t.Errorf("nv_inference_pending_request_count = %v, want 1", got)
	}
	if n := entered.Load(); n != 2 {
		t.Errorf("%d batches running on 2 instances", n)
	}
	close(gate)
	wg.Wait()
	close(statuses)
	for st := range statuses {
		if st != 200 {
			t.Errorf("status %d", st)
		}
	}
	if st, _ := s.Stats(SimpleModel); st.ExecutionCount != 3 || st.InferenceStats.Queue.Count != 3 {
		t.Errorf("stats %+v, want 3 executions with 3 queue samples", st)
	}
}

func TestHangUntilClientLeavesOrServerCloses(t *testing.T) {
	var hung atomic.Int32
	s, err := New(Options{Fault: func(BatchInfo) Fault { hung.Add(1); return Fault{Hang: true} }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("127.0.0.1:0", ""); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url := "http://" + s.Addr() + "/v2/models/simple/infer"
	body := requestFor(t, SimpleModel, 1, 0)

	// The client gives up: the request counts as failed and frees the instance.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitFor(t, func() bool { return hung.Load() == 1 }, "the batch to hang")
	cancel()
	if err := <-done; err == nil {
		t.Error("a hanging request got an answer")
	}
	waitFor(t, func() bool { st, _ := s.Stats(SimpleModel); return st.InferenceStats.Fail.Count == 1 }, "the abandoned request to count as failed")

	// The server closes: the hanging request ends with the connection.
	go func() {
		resp, err := http.Post(url, "application/json", bytes.NewReader(body))
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitFor(t, func() bool { return hung.Load() == 2 }, "the second batch to hang (the first freed its instance)")
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-done; err == nil {
		t.Error("a request hanging at Close got an answer")
	}
}

func TestCloseAndRestartOnTheSameAddress(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr, maddr := s.Addr(), s.MetricsAddr()
	if err := s.Start("127.0.0.1:0", ""); err == nil {
		t.Error("Start while serving succeeded")
	}
	body := requestFor(t, SimpleModel, 2, 0)
	infer := func() error {
		resp, err := http.Post("http://"+addr+"/v2/models/simple/infer", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := infer(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if s.Addr() != "" {
		t.Errorf("Addr after Close = %q", s.Addr())
	}
	if err := infer(); err == nil {
		t.Fatal("request to a closed emulator succeeded")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Start(addr, maddr); err != nil {
		t.Fatalf("restart on %s: %v", addr, err)
	}
	if err := infer(); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if st, _ := s.Stats(SimpleModel); st.ExecutionCount != 2 {
		t.Errorf("execution_count = %d after restart, want 2 (counters survive)", st.ExecutionCount)
	}
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /metrics: %d", resp.StatusCode)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

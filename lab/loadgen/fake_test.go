package loadgen

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/kserve"
)

// fault is what the fake server does with one request.
type fault int

const (
	answerOK    fault = iota
	answer503         // 503 with a KServe error body
	answerWrong       // 200 with OUTPUT0 off by one: verification must catch it
	answerHang        // never answer (until the client gives up)
	answerClose       // close the connection without answering
)

// fakeServer answers like a KServe v2 server serving Triton's "simple"
// (INT32 [-1,16] inputs, OUTPUT0 = sum, OUTPUT1 = difference). It counts
// what it did so tests can hold the client's account against it.
type fakeServer struct {
	*httptest.Server
	faults func(n int64) fault // by 1-based arrival order at the server; nil: all ok
	delay  time.Duration       // before every answer

	n, binaryBodies, jsonBodies atomic.Int64
	inFlight, peak              atomic.Int64
	mu                          sync.Mutex
	did                         map[fault]int64
	stop                        chan struct{}
}

func newFakeServer(t testing.TB, faults func(int64) fault) *fakeServer {
	t.Helper()
	f := &fakeServer{faults: faults, did: map[fault]int64{}, stop: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/models/simple", f.metadata)
	mux.HandleFunc("POST /v2/models/simple/infer", f.infer)
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Server.Close)
	t.Cleanup(func() { close(f.stop) }) // runs first: releases hanging handlers
	return f
}

var simpleMetadata = kserve.ModelMetadata{
	Name: "simple", Versions: []string{"1"}, Platform: "fake",
	Inputs: []kserve.TensorMetadata{
		{Name: "INPUT0", Datatype: "INT32", Shape: []int64{-1, 16}},
		{Name: "INPUT1", Datatype: "INT32", Shape: []int64{-1, 16}},
	},
	Outputs: []kserve.TensorMetadata{
		{Name: "OUTPUT0", Datatype: "INT32", Shape: []int64{-1, 16}},
		{Name: "OUTPUT1", Datatype: "INT32", Shape: []int64{-1, 16}},
	},
}

func (f *fakeServer) metadata(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(simpleMetadata)
}

func (f *fakeServer) count(what fault) {
	f.mu.Lock()
	f.did[what]++
	f.mu.Unlock()
}

// counts returns how often the server did what.
func (f *fakeServer) counts(what fault) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.did[what]
}

func (f *fakeServer) infer(w http.ResponseWriter, r *http.Request) {
	cur := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for p := f.peak.Load(); cur > p && !f.peak.CompareAndSwap(p, cur); p = f.peak.Load() {
	}
	n := f.n.Add(1)
	what := answerOK
	if f.faults != nil {
		what = f.faults(n)
	}
	f.count(what)

	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	hl := r.Header.Get(kserve.HeaderContentLength)
	if hl != "" {
		f.binaryBodies.Add(1)
	} else {
		f.jsonBodies.Add(1)
	}
	headerLen, err := kserve.ParseHeaderLength(hl, len(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req, err := kserve.DecodeRequest(body, headerLen)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	switch what {
	case answer503:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":"overloaded"}`)
		return
	case answerHang:
		select {
		case <-r.Context().Done():
		case <-f.stop:
		}
		return
	case answerClose:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	resp, err := simpleAnswer(req, what == answerWrong)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	kserve.WriteResponse(w, resp)
}

// simpleAnswer computes the simple model's outputs, binary when the request
// asked for binary outputs; wrong adds one to OUTPUT0's first element.
func simpleAnswer(req *kserve.Request, wrong bool) (*kserve.Response, error) {
	var in0, in1 *kserve.Tensor
	for i := range req.Inputs {
		switch req.Inputs[i].Name {
		case "INPUT0":
			in0 = &req.Inputs[i]
		case "INPUT1":
			in1 = &req.Inputs[i]
		}
	}
	if in0 == nil || in1 == nil || len(in0.Data) != len(in1.Data) {
		return nil, &kserve.Error{Status: 400, Msg: "want INPUT0 and INPUT1 of one shape"}
	}
	sum := make([]byte, len(in0.Data))
	diff := make([]byte, len(in0.Data))
	le := binary.LittleEndian
	for i := 0; i+4 <= len(sum); i += 4 {
		a, b := le.Uint32(in0.Data[i:]), le.Uint32(in1.Data[i:])
		le.PutUint32(sum[i:], a+b)
		le.PutUint32(diff[i:], a-b)
	}
	if wrong {
		sum[0]++
	}
	bin, _ := req.Parameters.Bool(kserve.ParamBinaryDataOutput)
	shape := in0.Shape
	return &kserve.Response{
		ModelName: "simple", ModelVersion: "1", ID: req.ID,
		Outputs: []kserve.Tensor{
			{Name: "OUTPUT0", Datatype: kserve.Int32, Shape: shape, Data: sum, Binary: bin},
			{Name: "OUTPUT1", Datatype: kserve.Int32, Shape: shape, Data: diff, Binary: bin},
		},
	}, nil
}

// every returns a fault plan: what for every k-th request, ok otherwise.
func every(k int64, what fault) func(int64) fault {
	return func(n int64) fault {
		if n%k == 0 {
			return what
		}
		return answerOK
	}
}

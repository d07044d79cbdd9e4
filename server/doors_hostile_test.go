package server_test

// Hostile clients at the doors: a caller reaches only the model and the
// Triton route it names, and the configuration decides which routes are
// open to it. A relay between the proxy and the emulator records every
// request line the proxy sends upstream, exactly as sent.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// recordingRelay stands between the proxy and the emulator: it records
// each request line's target as the proxy sent it, and answers 500 to
// every inference request but model simple's (the tests send inference
// calls to simple only: any other reached is a traversal's), so that a
// call counted against simple but sent elsewhere makes simple look
// failing.
type recordingRelay struct {
	addr  string // host:port
	mu    sync.Mutex
	lines []string
}

// clientMark marks the tests' own requests, which pass-through forwards.
const clientMark = "X-Test-Client"

func (r *recordingRelay) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		line := req.Method + " " + req.RequestURI
		if req.Header.Get(clientMark) == "" {
			line = "own " + line // not passed through from a test's client
		}
		r.mu.Lock()
		r.lines = append(r.lines, line)
		r.mu.Unlock()
		if req.Method == http.MethodPost && !strings.HasPrefix(req.RequestURI, "/v2/models/simple/") && req.RequestURI != "/v2/repository/index" {
			http.Error(w, `{"error":"reached through another model's path"}`, http.StatusInternalServerError)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// seen returns the request lines recorded since mark (a count of lines)
// but the proxy's own reads of the upstream's models (package registry,
// unmarked GETs and the repository index), which it makes when it likes.
func (r *recordingRelay) seen(mark int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.lines[mark:] {
		if own, ok := strings.CutPrefix(l, "own "); ok {
			if strings.HasPrefix(own, "GET ") || own == "POST /v2/repository/index" {
				continue
			}
			l = own
		}
		out = append(out, l)
	}
	return out
}

func (r *recordingRelay) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lines)
}

// relayedProxy starts the emulator behind a recording relay and the proxy
// in front of it, with both doors; model "image" is passed through (not
// batched), "simple" batched.
func relayedProxy(t *testing.T, edit func(*config.Config)) (*servertest.Proxy, *recordingRelay) {
	t.Helper()
	em := emulatortest.Start(t, emulator.Options{TimeScale: 0})
	grpcUp, stopGRPC, err := em.ServeGRPC("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopGRPC(time.Second) })
	rec := &recordingRelay{}
	relay := httptest.NewServer(rec.handler(em.Handler()))
	t.Cleanup(relay.Close)
	rec.addr = strings.TrimPrefix(relay.URL, "http://")
	p := servertest.Start(t, rec.addr, nil, func(c *config.Config) {
		c.GRPCListen, c.UpstreamGRPC = "127.0.0.1:0", grpcUp
		c.Models = map[string]config.Model{"image": {Policy: config.Passthrough}}
		c.Upstreams.FailingAfter = 2
		if edit != nil {
			edit(c)
		}
	})
	return p, rec
}

const simpleJSON = `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},` +
	`{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}]}`

// A model's name or version that would put another path upstream is
// answered at the door as Triton answers it, reaches no path upstream,
// and is counted against no model: the model it names stays healthy.
// Through the HTTP door (a batched model and a passed-through one) and the
// gRPC door; the paths the proxy does send upstream are sent exactly as
// built (batched) or as the client wrote them (passed through).
func TestSecurityTraversalReachesNoOtherPath(t *testing.T) {
	p, rec := relayedProxy(t, nil)
	// Redirects are not followed: the emulator's mux answers a path with
	// dot segments with one, which would be another request.
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path string) (int, string) {
		t.Helper()
		return asWritten(t, client, http.MethodPost, p.Base, path, simpleJSON)
	}
	mark := rec.mark()
	// Refused at the door, each several times over (more than the failure
	// detector's failing_after).
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{
		{"/v2/models/simple/versions/..%2F..%2Fimage/infer", http.StatusNotFound, `{"error":"Not Found"}`},
		{"/v2/models/simple/versions/%2E%2E%2F%2E%2E%2Fimage/infer", http.StatusNotFound, `{"error":"Not Found"}`},
		{"/v2/models/simple/versions/1%2F..%2F..%2F..%2Fimage/infer", http.StatusNotFound, `{"error":"Not Found"}`},
		{"/v2/models/image/versions/..%2F..%2Fsimple/infer", http.StatusNotFound, `{"error":"Not Found"}`},
		{"/v2/models/../infer", http.StatusNotFound, `{"error":"Request for unknown model: '..' is not found"}`},
		{"/v2/models/./infer", http.StatusNotFound, `{"error":"Request for unknown model: '.' is not found"}`},
		{"/v2/models/simple/versions/99999999999999999999/infer", http.StatusBadRequest, `{"error":"failed to get model version from specified version string '99999999999999999999' (details: stol), version should be an integral value > 0"}`},
	} {
		for range 3 {
			status, body := post(tc.path)
			if status != tc.status || body != tc.want {
				t.Errorf("POST %s: %d %s, want Triton's answer %d %s", tc.path, status, body, tc.status, tc.want)
			}
		}
	}
	// The gRPC door: a version and a model name of the same kinds.
	cc, err := grpc.NewClient(p.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	gc := pb.NewGRPCInferenceServiceClient(cc)
	for _, tc := range []struct {
		model, version string
		code           codes.Code
		msg            string
	}{
		{"simple", "../../image", codes.InvalidArgument, "failed to get model version from specified version string '../../image' (details: stol), version should be an integral value > 0"},
		{"simple", "..%2F..%2Fimage", codes.InvalidArgument, "failed to get model version from specified version string '..%2F..%2Fimage' (details: stol), version should be an integral value > 0"},
		{"image", "../../simple", codes.InvalidArgument, "failed to get model version from specified version string '../../simple' (details: stol), version should be an integral value > 0"},
		{"../image", "", codes.NotFound, "Request for unknown model: '../image' is not found"},
		{"simple/../image", "1", codes.NotFound, "Request for unknown model: 'simple/../image' is not found"},
	} {
		for range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := gc.ModelInfer(ctx, simpleGRPC(tc.model, tc.version))
			cancel()
			if st := status.Convert(err); st.Code() != tc.code || st.Message() != tc.msg {
				t.Errorf("ModelInfer(%q, version %q): %v, want %v %q", tc.model, tc.version, err, tc.code, tc.msg)
			}
		}
	}
	if lines := rec.seen(mark); len(lines) != 0 {
		t.Errorf("refused calls reached the upstream: %q", lines)
	}
	if failing, why := p.Dispatcher().Failing("simple"); failing {
		t.Errorf("model simple marked failing by calls that named other paths: %s", why)
	}

	// What the proxy does send goes as built or as written: a batched
	// call's canonical path (a version read as Triton reads it), and
	// passed-through paths with escaped slashes and dot segments, byte
	// for byte.
	mark = rec.mark()
	if status, body := post("/v2/models/simple/versions/001/infer"); status != http.StatusOK {
		t.Fatalf("POST simple version 001: %d %s", status, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := gc.ModelInfer(ctx, simpleGRPC("simple", "1abc")); err != nil {
		t.Fatalf("gRPC ModelInfer simple version 1abc (Triton reads 1): %v", err)
	}
	// Passed through: the model named is one the proxy does not batch
	// (Triton reads a path's segments undecoded: '..%2Fimage' is a name
	// like any other, and no model has it), or the path is no inference
	// path of the proxy's.
	passed := []string{
		"POST /v2/models/..%2Fimage/infer",
		"POST /v2/models/simple%2F..%2F..%2Fimage/infer",
		"POST /v2/models/%2E%2E/infer",
		"POST /v2/models/simple/versions/1/../../../image/infer",
		"GET /v2/models/image/versions/1/../../simple/config",
		"GET /v2/models/image%2F..%2Fsimple/config",
		"GET /v2/models/./image/../simple/ready",
		"GET /v2/models/image/versions/1/%2E%2E/%2e%2e/simple/stats",
	}
	for _, line := range passed {
		method, path, _ := strings.Cut(line, " ")
		asWritten(t, client, method, p.Base, path, simpleJSON)
	}
	want := append([]string{"POST /v2/models/simple/versions/1/infer", "POST /v2/models/simple/versions/1/infer"}, passed...)
	if got := rec.seen(mark); !slices.Equal(got, want) {
		t.Errorf("request lines sent upstream:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if failing, why := p.Dispatcher().Failing("simple"); failing {
		t.Errorf("model simple marked failing by calls passed through to other paths: %s", why)
	}
}

// asWritten sends a request with its path as written, uncleaned and not
// escaped again, marked as the test's own (clientMark), with header's
// pairs, and returns the answer's status and body.
func asWritten(t *testing.T, client *http.Client, method, base, path, body string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	req.URL.Opaque = path
	req.Header.Set(clientMark, "1")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// simpleGRPC is a one-row ModelInferRequest of model's version in the
// form the emulator's simple model takes.
func simpleGRPC(model, version string) *pb.ModelInferRequest {
	row := make([]int32, 16)
	for i := range row {
		row[i] = int32(i)
	}
	in := func(name string) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: "INT32", Shape: []int64{1, 16},
			Contents: &pb.InferTensorContents{IntContents: row}}
	}
	return &pb.ModelInferRequest{ModelName: model, ModelVersion: version, Inputs: []*pb.ModelInferRequest_InferInputTensor{in("INPUT0"), in("INPUT1")}}
}

// The routes the operator closes (restricted_api) are closed at both
// doors, to every spelling of their path, and answered as Triton answers
// a restricted API: nothing reaches the upstream. A category open to a
// header lets the calls that carry it through, the header with them;
// open categories are untouched; a reload opens or closes them live.
func TestSecurityRestrictedRoutes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ratebatch.yaml")
	p, rec := relayedProxy(t, func(c *config.Config) {
		c.RestrictedAPI = config.RestrictedAPI{"model-repository,shared-memory:admin-key=secret", "logging,trace"}
	})
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	call := func(method, path string, header ...string) (int, string) {
		t.Helper()
		return asWritten(t, client, method, p.Base, path, "", header...)
	}
	keyed := `{"error":"This API is restricted, expecting header 'admin-key'"}`
	closed := `{"error":"This API is restricted: closed to clients (restricted_api)"}`
	mark := rec.mark()
	for _, tc := range []struct {
		method, path string
		header       []string
		want         string
	}{
		{"POST", "/v2/repository/models/simple/unload", nil, keyed},
		{"POST", "/v2/repository/models/simple/unload", []string{"admin-key", "wrong"}, keyed},
		{"POST", "/v2/repository/index", nil, keyed},
		{"POST", "/v2/repository/models/x/../simple/unload", nil, keyed},
		{"POST", "/v2/models/simple/../../repository/models/simple/load", nil, keyed},
		{"POST", "/v2/repository/models/simple%2Funload", nil, keyed},
		{"POST", "/v2/systemsharedmemory/region/r0/register", nil, keyed},
		{"GET", "/v2/cudasharedmemory/status", nil, keyed},
		{"POST", "/v2/logging", []string{"admin-key", "secret"}, closed},
		{"GET", "/v2/%6cogging", nil, closed},
		{"POST", "/v2/trace/setting", nil, closed},
		{"GET", "/v2/models/simple/trace/setting", nil, closed},
	} {
		if status, body := call(tc.method, tc.path, tc.header...); status != http.StatusForbidden || body != tc.want {
			t.Errorf("%s %s %q: %d %s, want 403 %s", tc.method, tc.path, tc.header, status, body, tc.want)
		}
	}
	if lines := rec.seen(mark); len(lines) != 0 {
		t.Errorf("restricted calls reached the upstream: %q", lines)
	}
	// Open to the header: passed through, the header with it.
	mark = rec.mark()
	for _, path := range []string{"/v2/repository/index", "/v2/systemsharedmemory/status"} {
		if status, body := call("POST", path, "admin-key", "secret"); status == http.StatusForbidden {
			t.Errorf("POST %s with the header: %d %s", path, status, body)
		}
	}
	// Open categories: inference (batched), health, metadata, config.
	if status, body := asWritten(t, client, http.MethodPost, p.Base, "/v2/models/simple/infer", simpleJSON); status != http.StatusOK {
		t.Errorf("inference: %d %s", status, body)
	}
	for _, path := range []string{"/v2/health/ready", "/v2/models/simple", "/v2/models/simple/config"} {
		if status, body := call("GET", path); status != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, status, body)
		}
	}
	want := []string{"POST /v2/repository/index", "POST /v2/systemsharedmemory/status", "POST /v2/models/simple/infer",
		"GET /v2/health/ready", "GET /v2/models/simple", "GET /v2/models/simple/config"}
	if got := rec.seen(mark); !slices.Equal(got, want) {
		t.Errorf("sent upstream %q, want %q", got, want)
	}

	// The gRPC door: Triton's methods by their full names, the ones the
	// proxy's own messages do not declare as raw frames.
	cc, err := grpc.NewClient(p.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(grpcwire.Codec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	const svc = "/inference.GRPCInferenceService/"
	gKeyed := "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"
	gClosed := "This protocol is restricted: closed to clients (restricted_api)"
	invoke := func(method string, md ...string) error {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), md...), 10*time.Second)
		defer cancel()
		return cc.Invoke(ctx, method, &grpcwire.Frame{}, &grpcwire.Frame{})
	}
	for _, tc := range []struct {
		method string
		md     []string
		want   string // "" passes the door
	}{
		{"RepositoryModelUnload", nil, gKeyed},
		{"RepositoryModelUnload", []string{"admin-key", "secret"}, gKeyed},
		{"SystemSharedMemoryRegister", []string{"triton-grpc-protocol-admin-key", "wrong"}, gKeyed},
		{"LogSettings", []string{"triton-grpc-protocol-admin-key", "secret"}, gClosed},
		{"TraceSetting", nil, gClosed},
		{"RepositoryIndex", []string{"triton-grpc-protocol-admin-key", "secret"}, ""},
		{"ServerMetadata", nil, ""},
	} {
		err := invoke(svc+tc.method, tc.md...)
		st := status.Convert(err)
		switch {
		case tc.want != "" && (st.Code() != codes.Unavailable || st.Message() != tc.want):
			t.Errorf("%s %q: %v, want UNAVAILABLE %q", tc.method, tc.md, err, tc.want)
		case tc.want == "" && strings.Contains(st.Message(), "restricted"):
			t.Errorf("%s %q: refused: %v", tc.method, tc.md, err)
		}
	}
	gc := pb.NewGRPCInferenceServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := gc.ModelInfer(ctx, simpleGRPC("simple", "")); err != nil {
		t.Errorf("gRPC inference: %v", err)
	}

	// A reload opens logging and closes inference, at once at both doors.
	reloadFile(t, file, rec.addr, "1.10x", "restricted_api:\n  inference: closed\n  model-repository: admin-key=secret\n")
	p.ReloadFrom(config.Source{File: file})
	if err := p.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if status, body := call("GET", "/v2/logging"); status == http.StatusForbidden {
		t.Errorf("logging after the reload opened it: %d %s", status, body)
	}
	if status, body := asWritten(t, client, http.MethodPost, p.Base, "/v2/models/simple/infer", simpleJSON); status != http.StatusForbidden || body != closed {
		t.Errorf("inference after the reload closed it: %d %s", status, body)
	}
	if _, err := gc.ModelInfer(ctx, simpleGRPC("simple", "")); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC inference after the reload closed it: %v", err)
	}
}

// holdingUpstream serves gRPC calls as an upstream that never reads or
// answers them: a relayed stream holds whatever the proxy keeps of it.
func holdingUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(grpcwire.Codec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		<-ss.Context().Done()
		return ss.Context().Err()
	}))
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// Floods at the gRPC door stay within the memory budget and are refused
// cleanly: ModelInfer calls of a thousand one-byte inputs (each costing
// some 0.8 MB decoded, charged before it is decoded) and of 40,000 (past
// the bound both doors keep), and thousands of relayed streams held open
// by an upstream that never answers. Every call ends with an answer
// (RESOURCE_EXHAUSTED or INVALID_ARGUMENT, none lost, nothing panics),
// the budget is never passed by more than its bound for reads, and once
// the floods end everything held is given back and a plain call is
// served.
func TestHostileGRPCFloods(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 0})
	// The gRPC door's reads may pass the budget by one largest message,
	// and each connection by one read buffer (32 KiB) past that.
	const budget, maxMessage, conns = 32 << 20, 4 << 20, 4
	const bound = budget + maxMessage + conns*(32<<10)
	p := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.GRPCListen, c.UpstreamGRPC = "127.0.0.1:0", holdingUpstream(t)
		c.Limits.Memory, c.Limits.MaxBodyBytes = budget, maxMessage
	})
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(p.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(grpcwire.Codec{})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	inputs := func(n int) []byte {
		m := &pb.ModelInferRequest{ModelName: "simple"}
		for i := range n {
			m.Inputs = append(m.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: fmt.Sprint("x", i), Datatype: "INT8", Shape: []int64{1, 1}})
			m.RawInputContents = append(m.RawInputContents, []byte{1})
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var mu sync.Mutex
	outcomes := map[string]int{}
	count := func(what string, err error) {
		mu.Lock()
		outcomes[what+" "+status.Code(err).String()]++
		mu.Unlock()
	}
	// The calls, a fixed number each; then the streams, held open until
	// some past the budget were refused.
	thousand, forty := inputs(1024), inputs(40000)
	var calls sync.WaitGroup
	var clients []*grpc.ClientConn
	for range conns {
		clients = append(clients, dial())
	}
	for _, cc := range clients {
		for range 8 {
			calls.Go(func() {
				for _, msg := range [][]byte{forty, thousand, forty, thousand} {
					what := "1024 inputs"
					if len(msg) == len(forty) {
						what = "40000 inputs"
					}
					count(what, cc.Invoke(context.Background(), "/inference.GRPCInferenceService/ModelInfer", &grpcwire.Frame{B: msg}, &grpcwire.Frame{}))
				}
			})
		}
	}
	calls.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams, sent sync.WaitGroup
	var refused atomic.Int32
	for _, cc := range clients {
		for range 256 {
			sent.Add(1)
			streams.Go(func() {
				st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/inference.GRPCInferenceService/ModelStreamInfer")
				if err == nil {
					err = st.SendMsg(&grpcwire.Frame{B: make([]byte, 16<<10)})
				}
				sent.Done()
				if err == nil || err == io.EOF { // EOF: ended by the server, whose status RecvMsg reads
					err = st.RecvMsg(&grpcwire.Frame{}) // held until refused, or until the flood ends
				}
				if ctx.Err() != nil {
					err = nil
				} else if status.Code(err) == codes.ResourceExhausted {
					refused.Add(1)
				}
				count("stream", err)
			})
		}
	}
	sent.Wait()
	testpoll.Until(t, "streams past the budget to be refused", func() bool { return refused.Load() > 0 })
	cancel()
	streams.Wait()
	t.Logf("outcomes: %v; budget peak %d of %d", outcomes, p.MemoryBudget().Peak(), budget)
	for k, n := range outcomes {
		switch k {
		case "1024 inputs InvalidArgument", "1024 inputs ResourceExhausted", "40000 inputs InvalidArgument",
			"40000 inputs ResourceExhausted", "stream OK", "stream ResourceExhausted":
		default:
			t.Errorf("%d calls ended %s", n, k)
		}
	}
	if outcomes["40000 inputs InvalidArgument"] != 64 || outcomes["stream OK"] == 0 {
		t.Errorf("the 40,000 inputs not all refused as the HTTP door refuses them, or no stream held: %v", outcomes)
	}
	if peak := p.MemoryBudget().Peak(); peak > bound {
		t.Errorf("budget peak %d past %d: its %d, one largest message and a read buffer a connection", peak, bound, budget)
	}
	testpoll.Until(t, "the budget to be given back", func() bool { return p.MemoryBudget().Used() == 0 })
	plain, cancelPlain := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelPlain()
	if _, err := pb.NewGRPCInferenceServiceClient(dial()).ModelInfer(plain, simpleGRPC("simple", "")); err != nil {
		t.Errorf("a plain call after the floods: %v", err)
	}
}

package dispatcher

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/policy"
)

// rawUpstream listens on loopback and answers each request it reads by
// answer, which writes what it likes on the connection, bytes no real
// server would send included, and reports whether the connection may
// carry another request. It returns the address; the listener and every
// connection close when the test ends.
func rawUpstream(t *testing.T, answer func(c net.Conn, req *http.Request, body []byte) (keep bool)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
		wg    sync.WaitGroup
	)
	serve := func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, err := io.ReadAll(req.Body)
			if err != nil || !answer(c, req, body) {
				return
			}
		}
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// hostileDispatcher serves simple through the HTTP client to addr, with
// no retries and the given upstream timeout, logging to the returned
// buffer.
func hostileDispatcher(t *testing.T, addr string, rule policy.Rule, timeout time.Duration, o Outlier) (*Dispatcher, *syncBuffer) {
	t.Helper()
	up, err := NewHTTPUpstream("http://"+addr, 8, timeout)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = time.Hour
	}
	d := startModel(t, Options{Upstream: up, Outlier: o, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: 64, Planner: newPlanner(rule)})
	return d, logs
}

// The upstream's address is the operator's, not the client's: an upstream
// that refuses connections or drops one gets its callers a 503 or 502
// that says what kind of failure it was and names no address, and the
// readiness the data port answers names none either; the log keeps it.
func TestUpstreamAddressNotInErrors(t *testing.T) {
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}()
	reset := rawUpstream(t, func(c net.Conn, _ *http.Request, _ []byte) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"outputs\":")
		c.(*net.TCPConn).SetLinger(0) // RST, not FIN: the read fails naming both ends
		return false
	})
	for _, tc := range []struct {
		name, addr string
		status     int
		says       string
	}{
		{"refused", refused, http.StatusServiceUnavailable, "connection refused"},
		{"reset mid-answer", reset, http.StatusBadGateway, "broke off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, logs := hostileDispatcher(t, tc.addr, policy.Fill{Policy: "test", Batch: 1}, 5*time.Second, Outlier{})
			r := d.Submit(context.Background(), "simple", call(t, 1, 1))
			if status(r.Err) != tc.status || !strings.Contains(r.Err.Error(), tc.says) {
				t.Fatalf("%v, want %d saying %q", r.Err, tc.status, tc.says)
			}
			_, port, _ := net.SplitHostPort(tc.addr)
			if msg := r.Err.Error(); strings.Contains(msg, tc.addr) || strings.Contains(msg, ":"+port) {
				t.Errorf("the caller's error names the upstream's address %s: %q", tc.addr, msg)
			}
			if why := d.Unready(); strings.Contains(why, ":"+port) {
				t.Errorf("readiness names the upstream's address %s: %q", tc.addr, why)
			}
			if tc.status == http.StatusBadGateway && !strings.Contains(logs.String(), tc.addr) {
				t.Errorf("the log lacks the upstream's address %s: %q", tc.addr, logs.String())
			}
		})
	}
}

// simpleAnswer is the right answer to a batch of simple, the fake
// upstream's (simpleResponse), with edit applied to it before it is
// encoded, and its HTTP head.
func simpleAnswer(t *testing.T, req *http.Request, body []byte, edit func(*kserve.Response)) []byte {
	hl := -1
	if v := req.Header.Get(kserve.HeaderContentLength); v != "" {
		hl, _ = strconv.Atoi(v)
	}
	r, err := kserve.DecodeRequest(body, hl)
	if err != nil {
		t.Errorf("upstream: %v", err)
		return nil
	}
	resp := simpleResponse("simple", r)
	if edit != nil {
		edit(resp)
	}
	out, hl := rawResponse(resp)
	head := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n%s: %d\r\nContent-Length: %d\r\n\r\n",
		kserve.HeaderContentLength, hl, len(out))
	return append([]byte(head), out...)
}

// rawResponse encodes r in binary form as it is, however its shapes,
// datatypes and data disagree (kserve.AppendResponse would refuse that):
// what a broken upstream may send.
func rawResponse(r *kserve.Response) (body []byte, headerLen int) {
	h := fmt.Sprintf(`{"model_name":%q,"id":%q,"outputs":[`, r.ModelName, r.ID)
	var data []byte
	for i, o := range r.Outputs {
		if i > 0 {
			h += ","
		}
		shape, _ := json.Marshal(o.Shape)
		h += fmt.Sprintf(`{"name":%q,"datatype":%q,"shape":%s,"parameters":{"binary_data_size":%d}}`, o.Name, o.Datatype, shape, len(o.Data))
		data = append(data, o.Data...)
	}
	h += "]}"
	return append([]byte(h), data...), len(h)
}

// withLength gives an answer's Content-Length the value n.
func withLength(answer []byte, n int) []byte {
	i := bytes.Index(answer, []byte("\r\nContent-Length: ")) + 2
	j := i + bytes.IndexByte(answer[i:], '\r')
	return slices.Concat(answer[:i], []byte("Content-Length: "+strconv.Itoa(n)), answer[j:])
}

// bodyLen is the length of an answer's body.
func bodyLen(answer []byte) int { return len(answer) - bytes.Index(answer, []byte("\r\n\r\n")) - 4 }

// submitBatch submits one call per base at once, of rows[i] rows each,
// and returns their results once all are answered.
func submitBatch(t *testing.T, d *Dispatcher, bases []int32, rows []int) ([]*Call, []Result) {
	calls, results := make([]*Call, len(bases)), make([]Result, len(bases))
	var wg sync.WaitGroup
	for i := range bases {
		calls[i] = call(t, bases[i], rows[i])
		wg.Go(func() { results[i] = d.Submit(context.Background(), "simple", calls[i]) })
	}
	wg.Wait()
	return calls, results
}

// A broken or hostile upstream never mixes answers: a batched answer with
// fewer or more rows than sent, an output of the wrong size, a body cut
// short or reset, a Content-Length that lies either way, a body dripped
// slower than the upstream timeout: every caller of the batch gets an
// error or exactly its own rows, and the model's failure detector counts
// the batch (one is enough here: it marks the model failing). A slow drip
// ends at the upstream timeout. An upstream that answers a batch twice
// does not answer the next batch with the second copy: a kept-alive
// connection holding bytes after its answer is not used again.
func TestHostileUpstreamNeverMixesAnswers(t *testing.T) {
	const timeout = 300 * time.Millisecond
	row := func(o *kserve.Tensor) int { return len(o.Data) / int(o.Shape[0]) }
	tests := []struct {
		name   string
		answer func(t *testing.T, c net.Conn, req *http.Request, body []byte) bool
		status int // every caller's; 0: its own rows
	}{
		{"well-formed", func(t *testing.T, c net.Conn, req *http.Request, body []byte) bool {
			c.Write(simpleAnswer(t, req, body, nil))
			return true
		}, 0},
		{"a row short", func(t *testing.T, c net.Conn, req *http.Request, body []byte) bool {
			c.Write(simpleAnswer(t, req, body, func(r *kserve.Response) {
				for i := range r.Outputs {
					o := &r.Outputs[i]
					o.Data = o.Data[:len(o.Data)-row(o)]
					o.Shape[0]--
				}
			}))
			return true
		}, http.StatusBadGateway},
		{"a row more, a neighbour's", func(t *testing.T, c net.Conn, req *http.Request, body []byte) bool {
			c.Write(simpleAnswer(t, req, body, func(r *kserve.Response) {
				for i := range r.Outputs {
					o := &r.Outputs[i]
					o.Data = append(o.Data, o.Data[:row(o)]...)
					o.Shape[0]++
				}
			}))
			return true
		}, http.StatusBadGateway},
		{"an output of the wrong datatype's size", func(t *testing.T, c net.Conn, req *http.Request, body []byte) bool {
			c.Write(simpleAnswer(t, req, body, func(r *kserve.Response) { r.Outputs[0].Datatype = kserve.Int64 }))
			return true
		}, http.StatusBadGateway},
		{"an output of the wrong shape", func(t *testing.T, c net.Conn, req *http.Request, body []byte) bool {
			c.Write(simpleAnswer(t, req, body, func(r *kserve.Response) { r.Outputs[1].Shape[1] = 8 }))
			return true
		}, http.StatusBadGateway},
		{"body cut short", func(t *testing.T, c net.Conn, req *http.Request, body []byte) bool {
			a := simpleAnswer(t, req, body, nil)
			c.Write(a[:len(a)-bodyLen(a)/2])
			return false
		}, http.StatusBadGateway},
		{"reset mid-answer", func(t *testing.T, c net.Conn, req *http.Request, body []byte) bool {
			a := simpleAnswer(t, req, body, nil)
			c.Write(a[:len(a)-bodyLen(a)/2])
			time.Sleep(10 * time.Millisecond) // the part read before the reset
			c.(*net.TCPConn).SetLinger(0)
			return false
		}, http.StatusBadGateway},
		{"Content-Length longer than the body", func(t *testing.T, c net.Conn, req *http.Request, body []byte) bool {
			a := simpleAnswer(t, req, body, nil)
			c.Write(withLength(a, bodyLen(a)+100))
			time.Sleep(2 * timeout) // the rest never comes
			return false
		}, http.StatusGatewayTimeout},
		{"Content-Length shorter than the body", func(t *testing.T, c net.Conn, req *http.Request, body []byte) bool {
			a := simpleAnswer(t, req, body, nil)
			c.Write(withLength(a, bodyLen(a)-64))
			return true
		}, http.StatusBadGateway},
		{"a slow drip", func(t *testing.T, c net.Conn, req *http.Request, body []byte) bool {
			for _, b := range simpleAnswer(t, req, body, nil) {
				if _, err := c.Write([]byte{b}); err != nil {
					return false
				}
				time.Sleep(20 * time.Millisecond)
			}
			return true
		}, http.StatusGatewayTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := rawUpstream(t, func(c net.Conn, req *http.Request, body []byte) bool { return tc.answer(t, c, req, body) })
			d, _ := hostileDispatcher(t, addr, policy.Fill{Policy: "test", Batch: 4, MaxWait: 5 * time.Second}, timeout, Outlier{ConsecutiveErrors: 1})
			start := time.Now()
			calls, results := submitBatch(t, d, []int32{100, 200, 300}, []int{1, 2, 1})
			took := time.Since(start)
			for i, r := range results {
				if r.BatchRows != 4 {
					t.Errorf("caller %d went in a batch of %d rows, want the 3 callers' 4", i, r.BatchRows)
				}
				if tc.status == 0 {
					if err := checkAnswer(calls[i], r); err != nil {
						t.Errorf("caller %d: %v", i, err)
					}
					continue
				}
				if r.Err == nil {
					r.Release()
					t.Errorf("caller %d: answered, want %d", i, tc.status)
				} else if status(r.Err) != tc.status {
					t.Errorf("caller %d: %v, want %d", i, r.Err, tc.status)
				}
			}
			if failing, _ := d.Failing("simple"); failing != (tc.status != 0) {
				t.Errorf("model failing %v after the batch, want %v: the failure detector must count a broken answer", failing, tc.status != 0)
			}
			if tc.status == http.StatusGatewayTimeout && took > 3*timeout {
				t.Errorf("the batch took %v: an upstream timeout of %v must bound it", took, timeout)
			}
		})
	}
}

// An upstream that answers one batch twice: the second copy, the first
// batch's callers' rows, must not become the next batch's answer.
func TestHostileUpstreamAnsweringTwice(t *testing.T) {
	var n atomic.Int32
	addr := rawUpstream(t, func(c net.Conn, req *http.Request, body []byte) bool {
		a := simpleAnswer(t, req, body, nil)
		c.Write(a)
		if n.Add(1) == 1 {
			time.Sleep(20 * time.Millisecond) // after the client has read the first
			c.Write(a)
		}
		return true
	})
	d, _ := hostileDispatcher(t, addr, policy.Fill{Policy: "test", Batch: 4, MaxWait: 5 * time.Second}, 5*time.Second, Outlier{ConsecutiveErrors: 1})
	for i, bases := range [][]int32{{100, 200, 300}, {1000, 2000, 3000}} {
		calls, results := submitBatch(t, d, bases, []int{1, 2, 1})
		for j, r := range results {
			if err := checkAnswer(calls[j], r); err != nil {
				t.Errorf("batch %d, caller %d: %v", i, j, err)
			}
		}
		time.Sleep(50 * time.Millisecond) // the second copy is in
	}
}

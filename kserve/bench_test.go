package kserve

import (
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
)

// benchCase is one proxy workload: n callers, each sending one row of a
// tensor of the given datatype and shape, in binary or JSON form, and
// wanting its output back in the same form.
type benchCase struct {
	name   string
	dt     Datatype
	shape  []int64 // one row, batch dimension included
	binary bool
}

var benchCases = []benchCase{
	{"fp32x3x224x224-binary", FP32, []int64{1, 3, 224, 224}, true},
	{"int32x16-json", Int32, []int64{1, 16}, false},
}

// fixture holds the wire bodies a proxy would see: n request bodies and the
// batched response the upstream returns for them.
type fixture struct {
	bodies     [][]byte
	headerLens []int
	inBytes    int // tensor bytes over all requests
	resp       []byte
	respHL     int
}

func newFixture(tb testing.TB, bc benchCase, n int) *fixture {
	tb.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	fx := &fixture{}
	count, _ := ElementCount(bc.shape)
	for i := range n {
		t := Tensor{Name: "INPUT0", Datatype: bc.dt, Shape: bc.shape, Binary: bc.binary}
		t.Data = make([]byte, count*int64(bc.dt.Size()))
		for j := 0; j < len(t.Data); j += 4 { // plausible values: small ints, finite floats
			v := rng.Uint32()
			if bc.dt == FP32 {
				v = v&0x807fffff | 0x3f000000
			} else {
				v %= 100000
			}
			t.Data[j], t.Data[j+1], t.Data[j+2], t.Data[j+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		}
		r := &Request{ID: fmt.Sprintf("req-%d", i), Inputs: []Tensor{t}}
		if bc.binary {
			r.Parameters = Parameters{ParamBinaryDataOutput: true}
		}
		body, hl, err := AppendRequest(nil, r, false)
		if err != nil {
			tb.Fatal(err)
		}
		fx.bodies = append(fx.bodies, body)
		fx.headerLens = append(fx.headerLens, hl)
		fx.inBytes += len(t.Data)
	}
	// The upstream echoes the batched input as OUTPUT0, in binary.
	b := mergeFixture(tb, fx)
	body, hl := b.AppendBody(nil)
	batched, err := DecodeRequest(body, hl)
	if err != nil {
		tb.Fatal(err)
	}
	out := batched.Inputs[0]
	out.Name, out.Binary = "OUTPUT0", true
	fx.resp, fx.respHL, err = AppendResponse(nil, &Response{ModelName: "m", ModelVersion: "1", Outputs: []Tensor{out}})
	if err != nil {
		tb.Fatal(err)
	}
	return fx
}

// mergeFixture decodes every request body and merges them: the proxy's
// work on the way in, before the batched body is written.
func mergeFixture(tb testing.TB, fx *fixture) *Batch {
	reqs := make([]*Request, len(fx.bodies))
	for i, body := range fx.bodies {
		r, err := DecodeRequest(body, fx.headerLens[i])
		if err != nil {
			tb.Fatal(err)
		}
		reqs[i] = r
	}
	b, err := Merge(reqs)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// splitFixture decodes the batched response, splits it and encodes every
// caller's answer: binary outputs as header only (their data is written
// from the batched buffer, see WriteResponse), JSON outputs in full.
func splitFixture(tb testing.TB, fx *fixture, b *Batch, buf []byte) []byte {
	resp, err := DecodeResponse(fx.resp, fx.respHL)
	if err != nil {
		tb.Fatal(err)
	}
	parts, err := b.Split(resp)
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range parts {
		if buf, _, err = AppendResponseHeader(buf[:0], p); err != nil {
			tb.Fatal(err)
		}
	}
	return buf
}

func forEachBench(b *testing.B, fn func(b *testing.B, fx *fixture)) {
	for _, bc := range benchCases {
		for _, n := range []int{8, 64} {
			b.Run(fmt.Sprintf("%s/n=%d", bc.name, n), func(b *testing.B) {
				fx := newFixture(b, bc, n)
				b.SetBytes(int64(fx.inBytes))
				b.ReportAllocs()
				b.ResetTimer()
				fn(b, fx)
			})
		}
	}
}

// BenchmarkMerge: decode n request bodies, merge, write the batched body.
func BenchmarkMerge(b *testing.B) {
	forEachBench(b, func(b *testing.B, fx *fixture) {
		body, _ := mergeFixture(b, fx).AppendBody(nil) // warm the reused buffer
		b.ResetTimer()
		for b.Loop() {
			body, _ = mergeFixture(b, fx).AppendBody(body[:0])
		}
	})
}

// BenchmarkSplit: decode the batched response, split it, encode n answers.
func BenchmarkSplit(b *testing.B) {
	forEachBench(b, func(b *testing.B, fx *fixture) {
		batch := mergeFixture(b, fx)
		buf := splitFixture(b, fx, batch, nil)
		b.ResetTimer()
		for b.Loop() {
			buf = splitFixture(b, fx, batch, buf)
		}
	})
}

// BenchmarkMergeSplit is the whole codec round of one batch, writing the
// batched body into one buffer (one copy of the input bytes).
func BenchmarkMergeSplit(b *testing.B) {
	forEachBench(b, func(b *testing.B, fx *fixture) {
		batch := mergeFixture(b, fx)
		body, _ := batch.AppendBody(nil)
		buf := splitFixture(b, fx, batch, nil)
		b.ResetTimer()
		for b.Loop() {
			batch := mergeFixture(b, fx)
			body, _ = batch.AppendBody(body[:0])
			buf = splitFixture(b, fx, batch, buf)
		}
	})
}

// BenchmarkMergeSplitStream is MergeSplit with the batched body streamed by
// WriteTo (to io.Discard here, to a connection in the proxy): no copy of the
// input bytes at all besides the one into the socket.
func BenchmarkMergeSplitStream(b *testing.B) {
	forEachBench(b, func(b *testing.B, fx *fixture) {
		batch := mergeFixture(b, fx)
		buf := splitFixture(b, fx, batch, nil)
		b.ResetTimer()
		for b.Loop() {
			batch := mergeFixture(b, fx)
			if _, err := batch.WriteTo(io.Discard); err != nil {
				b.Fatal(err)
			}
			buf = splitFixture(b, fx, batch, buf)
		}
	})
}

// BenchmarkCopyTwice is the yardstick: copying the callers' tensor bytes
// twice into preallocated buffers.
func BenchmarkCopyTwice(b *testing.B) {
	forEachBench(b, func(b *testing.B, fx *fixture) {
		dst1 := make([]byte, fx.inBytes)
		dst2 := make([]byte, fx.inBytes) // touched: no page faults in the loop
		b.ResetTimer()
		for b.Loop() {
			dst1, dst2 = dst1[:0], dst2[:0]
			for i, body := range fx.bodies {
				data := body
				if hl := fx.headerLens[i]; hl >= 0 {
					data = body[hl:]
				}
				dst1 = append(dst1, data...)
			}
			dst2 = append(dst2, dst1...)
		}
	})
}

// BenchmarkDecodeJSON shows that decoding JSON data costs allocations per
// tensor, not per element: 16 and 4096 elements allocate the same; and what
// deferring the data saves a request that goes to Triton as it came.
func BenchmarkDecodeJSON(b *testing.B) {
	for _, decode := range []struct {
		name string
		f    func([]byte, int) (*Request, error)
	}{{"eager", DecodeRequest}, {"deferred", DecodeRequestDeferred}} {
		for _, elems := range []int64{16, 4096} {
			b.Run(fmt.Sprintf("%s/int32x%d", decode.name, elems), func(b *testing.B) {
				body := jsonInt32Body(b, elems)
				b.SetBytes(elems * 4)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := decode.f(body, -1); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func jsonInt32Body(tb testing.TB, elems int64) []byte {
	vals := make([]int32, elems)
	for i := range vals {
		vals[i] = int32(i*7919 - 100000)
	}
	t, err := NewTensor("INPUT0", []int64{1, elems}, vals)
	if err != nil {
		tb.Fatal(err)
	}
	body, _, err := AppendRequest(nil, &Request{ID: "x", Inputs: []Tensor{t}}, false)
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// TestJSONAllocationsPerTensor pins the allocation claim the benchmarks
// report: decoding, and encoding a response, in JSON allocate the same for
// 16 elements as for 4096 (and for FP32 as for INT32).
func TestJSONAllocationsPerTensor(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumentation changes allocation counts")
	}
	decode := func(body []byte) float64 {
		return testing.AllocsPerRun(20, func() {
			if _, err := DecodeRequest(body, -1); err != nil {
				t.Fatal(err)
			}
		})
	}
	small, large := decode(jsonInt32Body(t, 16)), decode(jsonInt32Body(t, 4096))
	if small != large || small > 10 {
		t.Errorf("decoding 16 INT32 allocates %v times, 4096 allocate %v", small, large)
	}
	fl := make([]float32, 4096)
	for i := range fl {
		fl[i] = float32(i) / 7
	}
	ft, _ := NewTensor("INPUT0", []int64{1, 4096}, fl)
	fbody, _, _ := AppendRequest(nil, &Request{ID: "x", Inputs: []Tensor{ft}}, false)
	if got := decode(fbody); got != small {
		t.Errorf("decoding 4096 FP32 allocates %v times, 16 INT32 %v", got, small)
	}
	buf := make([]byte, 0, 1<<16)
	resp := &Response{ModelName: "m", Outputs: []Tensor{ft}}
	if got := testing.AllocsPerRun(20, func() { buf, _, _ = AppendResponse(buf[:0], resp) }); got != 0 {
		t.Errorf("encoding a JSON response into a large enough buffer allocates %v times", got)
	}
}

// BenchmarkKeyMerge is the codec's work for one batch of n callers as the
// dispatcher does it, on bodies as tritonclient sends them in binary (two
// INT32 [1,16] inputs, two outputs wanted in binary): each caller's batch
// key, then MergeSameKey and the batched body. Decoding is outside the loop:
// the proxy does it before the dispatcher sees the call.
func BenchmarkKeyMerge(b *testing.B) {
	for _, n := range []int{1, 3, 8} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			reqs := make([]*Request, n)
			for i := range reqs {
				reqs[i] = tritonclientBinary(b, i)
			}
			body := []byte(nil)
			b.ReportAllocs()
			for b.Loop() {
				for _, r := range reqs {
					if _, _, ok := BatchKey(r); !ok {
						b.Fatal("not batchable")
					}
				}
				batch, err := MergeSameKey(reqs)
				if err != nil {
					b.Fatal(err)
				}
				body, _ = batch.AppendBody(body[:0])
			}
		})
	}
}

// tritonclientBinary decodes a request as tritonclient's HTTP client writes
// it with binary data both ways: binary_data_size on each input,
// binary_data on each requested output.
func tritonclientBinary(tb testing.TB, i int) *Request {
	tb.Helper()
	r := &Request{ID: fmt.Sprintf("%d", i)}
	for _, name := range []string{"INPUT0", "INPUT1"} {
		t, err := NewTensor(name, []int64{1, 16}, make([]int32, 16))
		if err != nil {
			tb.Fatal(err)
		}
		t.Binary = true
		r.Inputs = append(r.Inputs, t)
	}
	for _, name := range []string{"OUTPUT0", "OUTPUT1"} {
		r.Outputs = append(r.Outputs, RequestedOutput{Name: name, Parameters: Parameters{ParamBinaryData: true}})
	}
	body, hl, err := AppendRequest(nil, r, false)
	if err != nil {
		tb.Fatal(err)
	}
	d, err := DecodeRequest(body, hl)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

package loadgen

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/kserve"
)

func newTestRand() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

func int32Tensor(name string, vals ...int32) kserve.Tensor {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return kserve.Tensor{Name: name, Datatype: kserve.Int32, Shape: []int64{1, int64(len(vals))}, Data: b}
}

func TestVerifySimple(t *testing.T) {
	in := []kserve.Tensor{int32Tensor("INPUT0", 1, 5, math.MaxInt32), int32Tensor("INPUT1", 2, -3, 1)}
	sum := int32Tensor("OUTPUT0", 3, 2, math.MinInt32) // wraps as C does
	diff := int32Tensor("OUTPUT1", -1, 8, math.MaxInt32-1)
	wrongShape := sum
	wrongShape.Shape = []int64{3}
	tests := []struct {
		name string
		out  []kserve.Tensor
		want string // "" for a pass
	}{
		{"right", []kserve.Tensor{sum, diff}, ""},
		{"order does not matter", []kserve.Tensor{diff, sum}, ""},
		{"swapped outputs", []kserve.Tensor{rename(diff, "OUTPUT0"), rename(sum, "OUTPUT1")}, "OUTPUT0 differs from its inputs' sum at element 0"},
		{"another caller's answer", []kserve.Tensor{int32Tensor("OUTPUT0", 3, 2, 7), diff}, "at element 2"},
		{"missing output", []kserve.Tensor{sum}, "no output named OUTPUT1"},
		{"wrong shape", []kserve.Tensor{wrongShape, diff}, "has shape [3]"},
		{"wrong datatype", []kserve.Tensor{{Name: "OUTPUT0", Datatype: kserve.FP32, Shape: sum.Shape, Data: sum.Data}, diff}, "datatype FP32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verifySimple(in, tt.out)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("verify: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("verify error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func rename(t kserve.Tensor, name string) kserve.Tensor {
	t.Name = name
	return t
}

// Every datatype the verifier claims agrees with Go arithmetic in that type.
func TestAddSubDatatypes(t *testing.T) {
	for _, dt := range []kserve.Datatype{kserve.Int8, kserve.Uint8, kserve.Int16, kserve.Uint16, kserve.Int32,
		kserve.Uint32, kserve.Int64, kserve.Uint64, kserve.FP32, kserve.FP64} {
		t.Run(string(dt), func(t *testing.T) {
			rng := newTestRand()
			a := kserve.Tensor{Datatype: dt, Data: randomData(dt, 50, rng)}
			b := kserve.Tensor{Datatype: dt, Data: randomData(dt, 50, rng)}
			sum, err := addSub(&a, &b, false)
			if err != nil {
				t.Fatal(err)
			}
			diff, err := addSub(&a, &b, true)
			if err != nil {
				t.Fatal(err)
			}
			// (a+b) - b == a and (a-b) + b == a, element-wise, for
			// wrapping integers; for floats in [1,2) check the sum
			// directly in the type's precision.
			back, _ := addSub(&kserve.Tensor{Datatype: dt, Data: sum}, &b, true)
			fwd, _ := addSub(&kserve.Tensor{Datatype: dt, Data: diff}, &b, false)
			switch dt {
			case kserve.FP32:
				for i := 0; i < len(sum); i += 4 {
					x := math.Float32frombits(binary.LittleEndian.Uint32(a.Data[i:]))
					y := math.Float32frombits(binary.LittleEndian.Uint32(b.Data[i:]))
					if got := math.Float32frombits(binary.LittleEndian.Uint32(sum[i:])); got != x+y {
						t.Fatalf("element %d: %v + %v = %v, want %v", i/4, x, y, got, x+y)
					}
				}
			case kserve.FP64:
				for i := 0; i < len(sum); i += 8 {
					x := math.Float64frombits(binary.LittleEndian.Uint64(a.Data[i:]))
					y := math.Float64frombits(binary.LittleEndian.Uint64(b.Data[i:]))
					if got := math.Float64frombits(binary.LittleEndian.Uint64(diff[i:])); got != x-y {
						t.Fatalf("element %d: %v - %v = %v, want %v", i/8, x, y, got, x-y)
					}
				}
			default:
				if string(back) != string(a.Data) || string(fwd) != string(a.Data) {
					t.Fatalf("(a+b)-b or (a-b)+b differs from a")
				}
				if string(sum) == string(a.Data) {
					t.Fatalf("a+b == a for random b")
				}
			}
		})
	}
	for _, dt := range []kserve.Datatype{kserve.FP16, kserve.Bytes, kserve.Bool} {
		data := randomData(dt, 4, newTestRand())
		_, err := addSub(&kserve.Tensor{Datatype: dt, Data: data}, &kserve.Tensor{Datatype: dt, Data: data}, false)
		if err == nil || !strings.Contains(err.Error(), "cannot verify datatype "+string(dt)) {
			t.Fatalf("%s: %v, want an error naming the datatype", dt, err)
		}
	}
	odd := kserve.Tensor{Datatype: kserve.Int32, Data: make([]byte, 6)}
	if _, err := addSub(&odd, &odd, false); err == nil || !strings.Contains(err.Error(), "whole number") {
		t.Fatalf("6 bytes of INT32: %v, want an error", err)
	}
}

func TestVerifierFor(t *testing.T) {
	for _, m := range []string{"simple", "simple_nobatch"} {
		if _, ok := VerifierFor(m); !ok {
			t.Errorf("no verifier for %q", m)
		}
	}
	if _, ok := VerifierFor("resnet50"); ok {
		t.Errorf("a verifier for resnet50, which has none")
	}
}

// Whatever a server answers, checking it returns a kind and never panics:
// a broken proxy must show up in the counts, not crash the load generator.
func FuzzVerifyAnswer(f *testing.F) {
	ps, err := buildPayloads(simpleMetadata.Inputs, 1, 1, false, 1, maxPayloadBytes)
	if err != nil {
		f.Fatal(err)
	}
	p := &ps[0]
	req, err := kserve.DecodeRequest(p.body, -1)
	if err != nil {
		f.Fatal(err)
	}
	for _, bin := range []bool{false, true} {
		req.Parameters = kserve.Parameters{kserve.ParamBinaryDataOutput: bin}
		resp, err := simpleAnswer(req, false)
		if err != nil {
			f.Fatal(err)
		}
		body, hl, err := kserve.AppendResponse(nil, resp)
		if err != nil {
			f.Fatal(err)
		}
		hdr := ""
		if hl >= 0 {
			hdr = strconv.Itoa(hl)
		}
		f.Add(body, hdr)
	}
	f.Add([]byte(`{"outputs":[{"name":"OUTPUT0","datatype":"BYTES","shape":[1],"data":["x"]}]}`), "")
	f.Fuzz(func(t *testing.T, body []byte, headerLen string) {
		kind, err := verifyAnswer(VerifierFunc(verifySimple), p, answer{status: 200, body: body, headerLen: []byte(headerLen)})
		if (kind == KindNone) != (err == nil) {
			t.Fatalf("kind %v with error %v", kind, err)
		}
		if kind != KindNone && kind != KindDecode && kind != KindMismatch {
			t.Fatalf("kind %v", kind)
		}
	})
}

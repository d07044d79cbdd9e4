package grpcwire

import (
	"bytes"
	"encoding/binary"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/kserve"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// tritonclientMessage reads a ModelInferRequest as tritonclient (Python,
// tritonclient.grpc) serialised it: two INT32 inputs of shape [1, 16],
// one in a shared memory region (set_shared_memory), the other given
// with set_data_from_numpy(np.arange(16)), which tritonclient sends in
// raw_input_contents. Made with tritonclient.grpc._utils's
// _get_inference_request, as InferenceServerClient.infer builds it.
func tritonclientMessage(tb testing.TB, file string) *pb.ModelInferRequest {
	tb.Helper()
	b, err := os.ReadFile("testdata/" + file)
	if err != nil {
		tb.Fatal(err)
	}
	var m pb.ModelInferRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		tb.Fatal(err)
	}
	return &m
}

// arange16 is np.arange(16, dtype=np.int32) as raw bytes.
func arange16() []byte {
	b := make([]byte, 0, 64)
	for i := range 16 {
		b = binary.LittleEndian.AppendUint32(b, uint32(i))
	}
	return b
}

// Some inputs in shared memory, the others in raw_input_contents, as
// tritonclient sends them: raw_input_contents are indexed over the inputs
// not in shared memory, as Triton reads them, whichever input the region
// holds; the request is one Triton handles alone (no batch key).
func TestSharedMemoryBesideRawContents(t *testing.T) {
	for _, tc := range []struct {
		file     string
		shm, raw int // the inputs in shared memory and raw
	}{
		{"tritonclient-shm-input0.bin", 0, 1},
		{"tritonclient-shm-input1.bin", 1, 0},
	} {
		t.Run(tc.file, func(t *testing.T) {
			m := tritonclientMessage(t, tc.file)
			if len(m.RawInputContents) != 1 || len(m.Inputs) != 2 {
				t.Fatalf("the message has %d raw entries for %d inputs, want 1 for 2", len(m.RawInputContents), len(m.Inputs))
			}
			req, err := ToRequest(m)
			if err != nil {
				t.Fatalf("refused what Triton reads: %v", err)
			}
			if !req.Inputs[tc.shm].SharedMemory() || req.Inputs[tc.shm].Data != nil {
				t.Fatalf("input %d: shared memory %v, %d bytes of data; want the region, no data", tc.shm, req.Inputs[tc.shm].SharedMemory(), len(req.Inputs[tc.shm].Data))
			}
			if !bytes.Equal(req.Inputs[tc.raw].Data, arange16()) {
				t.Fatalf("input %d: data %v, want raw_input_contents[0]", tc.raw, req.Inputs[tc.raw].Data)
			}
			if _, _, ok := kserve.BatchKey(req); ok {
				t.Fatal("a request with an input in shared memory has a batch key: it must pass through")
			}
		})
	}
}

// What Triton refuses of shared memory and raw contents, the converter
// refuses in Triton's words.
func TestSharedMemoryRawContentsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(m *pb.ModelInferRequest)
		want string
	}{
		{"a raw input without its entry", func(m *pb.ModelInferRequest) { m.RawInputContents = nil; m.Inputs[1].Contents = nil }, "needs 16 elements"},
		{"raw contents for fewer inputs than read them", func(m *pb.ModelInferRequest) {
			delete(m.Inputs[0].Parameters, kserve.ParamSharedMemRegion)
		}, "unable to find data for input tensor 'INPUT1'"},
		{"contents of an input in shared memory", func(m *pb.ModelInferRequest) {
			m.Inputs[0].Contents = &pb.InferTensorContents{IntContents: make([]int32, 16)}
		}, "unexpected 'content' provided when using shared memory for input tensor 'INPUT0'"},
		{"contents beside raw contents", func(m *pb.ModelInferRequest) {
			m.Inputs[1].Contents = &pb.InferTensorContents{IntContents: make([]int32, 16)}
		}, "contents field must not be specified when using raw_input_contents for 'INPUT1'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tritonclientMessage(t, "tritonclient-shm-input0.bin")
			tc.edit(m)
			_, err := ToRequest(m)
			if err == nil || !strings.Contains(err.Error(), tc.want) || kserve.ErrorStatus(err) != 400 {
				t.Fatalf("got %v, want a 400 saying %q", err, tc.want)
			}
		})
	}
}

// FuzzToRequest: any ModelInferRequest a client sends, shared memory and
// raw contents mixed as they may be, is read or refused with a 400, never
// a panic; what is read holds data that fits its shape for every input
// not in shared memory and none for those in it, and the raw entries are
// used in order over the inputs not in shared memory.
func FuzzToRequest(f *testing.F) {
	for _, file := range []string{"tritonclient-shm-input0.bin", "tritonclient-shm-input1.bin"} {
		b, err := os.ReadFile("testdata/" + file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	typed, _ := proto.Marshal(&pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "T", Datatype: "BYTES", Shape: []int64{2, 1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("hi"), {}}}},
	}})
	f.Add(typed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.ModelInferRequest
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		req, err := ToRequest(&m)
		if err != nil {
			if kserve.ErrorStatus(err) != 400 {
				t.Fatalf("refused with %d, want 400: %v", kserve.ErrorStatus(err), err)
			}
			return
		}
		next := 0
		for i := range req.Inputs {
			in := &req.Inputs[i]
			if in.SharedMemory() {
				if in.Data != nil {
					t.Fatalf("input %d in shared memory holds %d bytes", i, len(in.Data))
				}
				continue
			}
			if err := in.CheckData(); err != nil {
				t.Fatalf("accepted input %d whose data does not fit: %v", i, err)
			}
			if len(m.RawInputContents) > 0 {
				if !bytes.Equal(in.Data, m.RawInputContents[next]) {
					t.Fatalf("input %d: not raw entry %d", i, next)
				}
				next++
			}
		}
	})
}

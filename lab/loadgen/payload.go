package loadgen

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"

	"github.com/ratebatch/ratebatch/kserve"
)

// FetchMetadata asks the target for the model's metadata; Run uses it to
// learn which inputs to send when Config.Inputs is empty.
func FetchMetadata(ctx context.Context, client *http.Client, target, model, version string) (kserve.ModelMetadata, error) {
	ep, err := parseEndpoint(target, model, version)
	if err != nil {
		return kserve.ModelMetadata{}, err
	}
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.metaURL, nil)
	if err != nil {
		return kserve.ModelMetadata{}, fmt.Errorf("model metadata: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return kserve.ModelMetadata{}, fmt.Errorf("model metadata: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return kserve.ModelMetadata{}, fmt.Errorf("model metadata from %s: %w", ep.metaURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return kserve.ModelMetadata{}, fmt.Errorf("model metadata from %s: status %d: %.200s (is the model name right and the model loaded?)",
			ep.metaURL, resp.StatusCode, body)
	}
	var md kserve.ModelMetadata
	if err := json.Unmarshal(body, &md); err != nil {
		return kserve.ModelMetadata{}, fmt.Errorf("model metadata from %s: %w", ep.metaURL, err)
	}
	if len(md.Inputs) == 0 {
		return kserve.ModelMetadata{}, fmt.Errorf("model metadata from %s lists no inputs", ep.metaURL)
	}
	return md, nil
}

// payload is one prebuilt request: encoded once, sent many times.
type payload struct {
	id            string
	body          []byte
	headerLen     int    // length of the JSON header in the binary form, -1 for JSON
	headerLenText []byte // headerLen in decimal, for the HTTP header
	inputs        []kserve.Tensor
	grpcBody      []byte // the ModelInferRequest message, for a gRPC run
}

// resolveShape turns a metadata shape into a concrete one: the leading -1
// (the batch dimension) becomes rows, any other -1 becomes 1.
func resolveShape(in kserve.TensorMetadata, rows int) ([]int64, error) {
	shape := make([]int64, len(in.Shape))
	batched := len(in.Shape) > 0 && in.Shape[0] == -1
	if !batched && rows != 1 {
		return nil, fmt.Errorf("input %q has shape %s with no batch dimension (a leading -1), so rows must be 1, not %d",
			in.Name, kserve.FormatShape(in.Shape), rows)
	}
	for i, d := range in.Shape {
		switch {
		case i == 0 && batched:
			shape[i] = int64(rows)
		case d == -1:
			shape[i] = 1
		case d < 0:
			return nil, fmt.Errorf("input %q: shape %s has dimension %d", in.Name, kserve.FormatShape(in.Shape), d)
		default:
			shape[i] = d
		}
	}
	return shape, nil
}

// maxPayloadBytes caps the memory of prebuilt bodies when Config.Payloads
// is not given: large inputs get fewer distinct bodies.
const maxPayloadBytes = 64 << 20

// buildPayloads encodes n distinct requests (n <= 0: as many as fit in
// budget bytes, at least 1 and at most 1024) with pseudo-random data drawn
// from seed.
func buildPayloads(inputs []kserve.TensorMetadata, rows, n int, binaryForm bool, seed uint64, budget int) ([]payload, error) {
	if len(inputs) == 0 {
		return nil, fmt.Errorf("no model inputs to send")
	}
	if rows < 1 {
		return nil, fmt.Errorf("rows per request must be at least 1, not %d", rows)
	}
	type spec struct {
		name  string
		dt    kserve.Datatype
		shape []int64
		elems int64
	}
	specs := make([]spec, len(inputs))
	for i, in := range inputs {
		dt, err := kserve.ParseDatatype(in.Datatype)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", in.Name, err)
		}
		shape, err := resolveShape(in, rows)
		if err != nil {
			return nil, err
		}
		elems, err := kserve.ElementCount(shape)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", in.Name, err)
		}
		if elems*8 > maxPayloadBytes {
			return nil, fmt.Errorf("input %q: %d elements per request is more than a load generator should send", in.Name, elems)
		}
		specs[i] = spec{in.Name, dt, shape, elems}
	}
	var params kserve.Parameters
	if binaryForm {
		params = kserve.Parameters{kserve.ParamBinaryDataOutput: true}
	}
	rng := rand.New(rand.NewPCG(seed, 0x7061796c6f616473)) // "payloads"
	var out []payload
	var total int
	for k := 0; n <= 0 || k < n; k++ {
		req := kserve.Request{ID: "lg-" + strconv.Itoa(k), Parameters: params, Inputs: make([]kserve.Tensor, len(specs))}
		for i, s := range specs {
			req.Inputs[i] = kserve.Tensor{
				Name:     s.name,
				Datatype: s.dt,
				Shape:    s.shape,
				Data:     randomData(s.dt, s.elems, rng),
				Binary:   binaryForm,
			}
		}
		body, headerLen, err := kserve.AppendRequest(nil, &req, binaryForm)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		if !binaryForm {
			headerLen = -1
		}
		p := payload{id: req.ID, body: body, headerLen: headerLen, inputs: req.Inputs}
		if headerLen >= 0 {
			p.headerLenText = strconv.AppendInt(nil, int64(headerLen), 10)
		}
		out = append(out, p)
		total += len(body)
		if n <= 0 && (len(out) == 1024 || total+len(body) > budget) {
			break
		}
	}
	return out, nil
}

// randomData returns n elements of dt, little-endian. Values stay small
// (integers within a quarter of their range, floats in [1,2)) so that a
// model that adds or subtracts inputs, like Triton's simple, cannot overflow.
func randomData(dt kserve.Datatype, n int64, rng *rand.Rand) []byte {
	if dt == kserve.Bytes {
		const strLen = 8
		b := make([]byte, 0, n*(4+strLen))
		for range n {
			b = binary.LittleEndian.AppendUint32(b, strLen)
			for range strLen {
				b = append(b, byte('a'+rng.IntN(26)))
			}
		}
		return b
	}
	size := dt.Size()
	b := make([]byte, int(n)*size)
	for i := range int(n) {
		e := b[i*size : (i+1)*size]
		switch dt {
		case kserve.Bool:
			e[0] = byte(rng.IntN(2))
		case kserve.Uint8:
			e[0] = byte(rng.IntN(1 << 6))
		case kserve.Int8:
			e[0] = byte(int8(rng.IntN(1<<6) - 1<<5))
		case kserve.Uint16:
			binary.LittleEndian.PutUint16(e, uint16(rng.IntN(1<<14)))
		case kserve.Int16:
			binary.LittleEndian.PutUint16(e, uint16(int16(rng.IntN(1<<14)-1<<13)))
		case kserve.Uint32:
			binary.LittleEndian.PutUint32(e, uint32(rng.IntN(1<<30)))
		case kserve.Int32:
			binary.LittleEndian.PutUint32(e, uint32(int32(rng.IntN(1<<30)-1<<29)))
		case kserve.Uint64:
			binary.LittleEndian.PutUint64(e, rng.Uint64N(1<<62))
		case kserve.Int64:
			binary.LittleEndian.PutUint64(e, uint64(rng.Int64N(1<<62)-1<<61))
		case kserve.FP16: // sign 0, exponent 15 (2^0), random 10-bit fraction
			binary.LittleEndian.PutUint16(e, 0x3c00|uint16(rng.IntN(1<<10)))
		case kserve.BF16: // sign 0, exponent 127, random 7-bit fraction
			binary.LittleEndian.PutUint16(e, 0x3f80|uint16(rng.IntN(1<<7)))
		case kserve.FP32:
			binary.LittleEndian.PutUint32(e, math.Float32bits(1+rng.Float32()))
		case kserve.FP64:
			binary.LittleEndian.PutUint64(e, math.Float64bits(1+rng.Float64()))
		}
	}
	return b
}

package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// The gRPC form of the load (Config.GRPC) sends ModelInfer to Triton's
// gRPC port (KServe v2 gRPC, as tritonclient.grpc and perf_analyzer -i grpc
// do), inputs in raw_input_contents. Each request is marshalled once, when
// the payloads are built, and sent and received as unread bytes, so the
// request path encodes and decodes nothing, as the HTTP path does.

// grpcConns is how many connections a run spreads its calls over. One
// HTTP/2 connection carries every call of tritonclient; a few keep one
// connection's single writer from being what a high-rate run measures.
const grpcConns = 4

const methodModelInfer = "/inference.GRPCInferenceService/ModelInfer"

// grpcTarget is the host:port of a gRPC target: "host:port" or
// "grpc://host:port".
func grpcTarget(target, model string) (string, error) {
	if model == "" {
		return "", errors.New("no model name")
	}
	addr := strings.TrimPrefix(target, "grpc://")
	if strings.Contains(addr, "://") {
		return "", fmt.Errorf("gRPC target %q: give host:port (Triton's gRPC port, e.g. 127.0.0.1:8001)", target)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("gRPC target %q: %w (want host:port, e.g. 127.0.0.1:8001)", target, err)
	}
	return addr, nil
}

func dialGRPC(addr string) (*grpc.ClientConn, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(grpcwire.Codec{})))
	if err != nil {
		return nil, fmt.Errorf("gRPC target %s: %w", addr, err)
	}
	return cc, nil
}

// FetchMetadataGRPC asks a gRPC target for the model's metadata.
func FetchMetadataGRPC(ctx context.Context, target, model, version string) (kserve.ModelMetadata, error) {
	addr, err := grpcTarget(target, model)
	if err != nil {
		return kserve.ModelMetadata{}, err
	}
	cc, err := dialGRPC(addr)
	if err != nil {
		return kserve.ModelMetadata{}, err
	}
	defer cc.Close()
	md, err := pb.NewGRPCInferenceServiceClient(cc).ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: model, Version: version})
	if err != nil {
		return kserve.ModelMetadata{}, fmt.Errorf("model metadata from %s: %w (is the model name right and the model loaded?)", addr, err)
	}
	if len(md.GetInputs()) == 0 {
		return kserve.ModelMetadata{}, fmt.Errorf("model metadata from %s lists no inputs", addr)
	}
	return grpcwire.FromModelMetadata(md), nil
}

// marshalGRPC gives every payload its ModelInfer message, encoded.
func marshalGRPC(ps []payload, model, version string) error {
	for i := range ps {
		p := &ps[i]
		m := &pb.ModelInferRequest{ModelName: model, ModelVersion: version, Id: p.id,
			Inputs: make([]*pb.ModelInferRequest_InferInputTensor, len(p.inputs)), RawInputContents: make([][]byte, len(p.inputs))}
		for k, t := range p.inputs {
			m.Inputs[k] = &pb.ModelInferRequest_InferInputTensor{Name: t.Name, Datatype: string(t.Datatype), Shape: t.Shape}
			m.RawInputContents[k] = t.Data
		}
		b, err := proto.Marshal(m)
		if err != nil {
			return fmt.Errorf("encode request %s: %w", p.id, err)
		}
		p.grpcBody = b
	}
	return nil
}

// grpcClient owns the connections of one gRPC run.
type grpcClient struct {
	conns   []*grpc.ClientConn
	next    atomic.Uint32
	timeout time.Duration
}

func newGRPCClient(addr string, timeout time.Duration) (*grpcClient, error) {
	c := &grpcClient{timeout: timeout}
	for range grpcConns {
		cc, err := dialGRPC(addr)
		if err != nil {
			c.close()
			return nil, err
		}
		cc.Connect()
		c.conns = append(c.conns, cc)
	}
	return c, nil
}

func (c *grpcClient) abort() { c.close() }

func (c *grpcClient) close() {
	for _, cc := range c.conns {
		cc.Close()
	}
}

// newSession gives each worker a connection, round-robin.
func (c *grpcClient) newSession(bool) sender {
	return &grpcSession{cc: c.conns[int(c.next.Add(1))%len(c.conns)], timeout: c.timeout}
}

type grpcSession struct {
	cc      *grpc.ClientConn
	timeout time.Duration
	out     grpcwire.Frame
}

// post sends one prebuilt message. A call that ends with a status is an
// answer, counted under the HTTP status of its code (grpcwire.HTTPStatus)
// as the HTTP form counts Triton's; the client's own deadline and
// cancellation are errors, as on HTTP.
func (s *grpcSession) post(p *payload) (answer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	s.out.B = nil
	err := s.cc.Invoke(ctx, methodModelInfer, &grpcwire.Frame{B: p.grpcBody}, &s.out)
	if err == nil {
		return answer{status: http.StatusOK, body: s.out.B, grpc: true}, nil
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.DeadlineExceeded:
		if ctx.Err() != nil {
			return answer{}, fmt.Errorf("%w: %s", context.DeadlineExceeded, st.Message())
		}
	case codes.Canceled:
		return answer{}, fmt.Errorf("%w: %s", context.Canceled, st.Message())
	}
	return answer{status: grpcwire.HTTPStatus(st.Code()), body: []byte(st.Message()), grpc: true}, nil
}

// decodeGRPCAnswer reads a ModelInfer answer for verification.
func decodeGRPCAnswer(body []byte) (*kserve.Response, error) {
	var m pb.ModelInferResponse
	if err := proto.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	return grpcwire.FromResponse(&m)
}

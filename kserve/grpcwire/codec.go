package grpcwire

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Frame is one gRPC message as bytes, unread: what the proxy relays and
// what a load generator sends prebuilt.
type Frame struct{ B []byte }

// Codec passes Frames as they are and gives every other message (the
// ModelInfer messages the proxy reads, health checks) to the proto codec.
// It keeps the proto codec's name, so clients and Triton see "proto".
// Use it with grpc.ForceCodecV2 or grpc.ForceServerCodecV2.
type Codec struct{}

var protoCodec = encoding.GetCodecV2(proto.Name)

func (Codec) Name() string { return proto.Name }

func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*Frame); ok {
		return mem.BufferSlice{mem.SliceBuffer(f.B)}, nil
	}
	return protoCodec.Marshal(v)
}

func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*Frame); ok {
		f.B = data.Materialize() // data is recycled once Unmarshal returns
		return nil
	}
	return protoCodec.Unmarshal(data, v)
}

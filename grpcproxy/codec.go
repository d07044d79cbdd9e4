package grpcproxy

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// frame is one gRPC message as bytes, unread: what the proxy relays.
type frame struct{ b []byte }

// codec relays frames as they are and gives every other message (the
// ModelInfer messages the proxy reads, health checks) to the proto codec.
// It keeps the proto codec's name, so clients and Triton see "proto".
type codec struct{}

var protoCodec = encoding.GetCodecV2(proto.Name)

func (codec) Name() string { return proto.Name }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*frame); ok {
		return mem.BufferSlice{mem.SliceBuffer(f.b)}, nil
	}
	return protoCodec.Marshal(v)
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*frame); ok {
		f.b = data.Materialize() // data is recycled once Unmarshal returns
		return nil
	}
	return protoCodec.Unmarshal(data, v)
}

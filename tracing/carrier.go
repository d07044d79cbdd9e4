package tracing

import (
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/metadata"
)

// HeaderCarrier adapts a fasthttp request header to the propagators:
// traceparent read from a client's request, written into an upstream one.
type HeaderCarrier struct{ H *fasthttp.RequestHeader }

var _ propagation.TextMapCarrier = HeaderCarrier{}

// Get returns the header's value.
func (c HeaderCarrier) Get(key string) string { return string(c.H.Peek(key)) }

// Set sets the header.
func (c HeaderCarrier) Set(key, value string) { c.H.Set(key, value) }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	var keys []string
	for k := range c.H.All() {
		keys = append(keys, string(k))
	}
	return keys
}

// MetadataCarrier adapts gRPC metadata to the propagators (keys are
// lower case in gRPC metadata, as traceparent is).
type MetadataCarrier metadata.MD

var _ propagation.TextMapCarrier = MetadataCarrier{}

// Get returns the key's first value.
func (c MetadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets the key's value.
func (c MetadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

// Keys lists the keys.
func (c MetadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

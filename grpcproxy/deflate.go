package grpcproxy

import (
	"compress/zlib"
	"io"

	"google.golang.org/grpc/encoding"
)

// deflate is gRPC's "deflate" message encoding, which Triton's server and
// tritonclient (compression_algorithm="deflate") speak besides gzip:
// gRPC's C core writes it in the zlib format (RFC 1950), not raw deflate.
// grpc-go ships only gzip, so the door registers this one.
type deflate struct{}

func (deflate) Name() string { return "deflate" }

func (deflate) Compress(w io.Writer) (io.WriteCloser, error) { return zlib.NewWriter(w), nil }

func (deflate) Decompress(r io.Reader) (io.Reader, error) { return zlib.NewReader(r) }

func init() { encoding.RegisterCompressor(deflate{}) }

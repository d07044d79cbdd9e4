package door

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// GRPCSource names a TCP peer by its address, apart from the HTTP door's
// connection numbers, and leaves other peers unknown.
func TestGRPCSource(t *testing.T) {
	id := func(addr net.Addr) uint64 {
		return GRPCSource(addr)
	}
	a := id(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 40000})
	for _, tt := range []struct {
		name string
		got  uint64
		want func(uint64) bool
	}{
		{"a TCP peer", a, func(v uint64) bool { return v>>63 == 1 }},
		{"the same peer again", id(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 40000}), func(v uint64) bool { return v == a }},
		{"another port", id(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 40001}), func(v uint64) bool { return v != a && v>>63 == 1 }},
		{"another host", id(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 2).To4(), Port: 40000}), func(v uint64) bool { return v != a && v>>63 == 1 }},
		{"a Unix socket", id(&net.UnixAddr{Name: "@", Net: "unix"}), func(v uint64) bool { return v == 0 }},
		{"no address", GRPCSource(nil), func(v uint64) bool { return v == 0 }},
	} {
		if !tt.want(tt.got) {
			t.Errorf("%s: source %#x", tt.name, tt.got)
		}
	}
}

// BenchmarkGRPCSource is naming a gRPC call's connection: the peer's
// lookup in the call's context and the hash of its address.
func BenchmarkGRPCSource(b *testing.B) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3).To4(), Port: 40000}})
	ctx = metadata.NewIncomingContext(ctx, metadata.MD{}) // a layer above it, as grpc-go's stream context has
	var sum uint64
	for b.Loop() {
		if p, ok := peer.FromContext(ctx); ok {
			sum += GRPCSource(p.Addr)
		}
	}
	if sum == 0 {
		b.Fatal("no source")
	}
}

// The two doors' sources never meet: an HTTP connection's number is in
// the lower half, a gRPC connection's hash in the upper.
func TestSourcesOfTheTwoDoorsApart(t *testing.T) {
	for _, id := range []uint64{1, 2, 1 << 40, 1<<63 - 1} {
		if HTTPSource(id)>>63 != 0 {
			t.Errorf("HTTP connection %d: source %#x in the gRPC half", id, HTTPSource(id))
		}
	}
	if g := GRPCSource(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 1}); g>>63 != 1 {
		t.Errorf("gRPC source %#x in the HTTP half", g)
	}
}

package loadgen

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriteSummaryNamesTheProtocolsStatuses(t *testing.T) {
	s := Summary{OK: 106, Errors: 3, StatusCounts: map[int]int64{200: 106, 503: 2, 400: 1}}
	tests := []struct {
		grpc bool
		want string
	}{
		{false, "HTTP status (200 106, 503 2, 400 1)\n"},
		{true, "gRPC status (OK 106, Unavailable 2, InvalidArgument 1)\n"},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		WriteSummary(&b, s, tt.grpc)
		if !strings.Contains(b.String(), tt.want) {
			t.Errorf("grpc %v: summary\n%s\nwant the line %q", tt.grpc, b.String(), tt.want)
		}
		if tt.grpc && strings.Contains(b.String(), "HTTP") {
			t.Errorf("gRPC summary speaks of HTTP:\n%s", b.String())
		}
	}
}

func TestWriteVerified(t *testing.T) {
	tests := []struct {
		s    Summary
		want string
	}{
		{Summary{OK: 42}, "verify: all 42 answers verified against their own inputs\n"},
		{Summary{OK: 40, ErrorsByKind: map[string]int64{"mismatch": 1, "decode": 1}}, "verify: 2 of 42 answers failed verification\n"},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		WriteVerified(&b, tt.s)
		if b.String() != tt.want {
			t.Errorf("WriteVerified(%+v) = %q, want %q", tt.s, b.String(), tt.want)
		}
	}
}

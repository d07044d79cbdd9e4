package proxy

import (
	"testing"
	"time"
)

func TestDoorsCountPerProtocol(t *testing.T) {
	m := NewMetrics(nil)
	m.Answered("simple", ProtocolGRPC, time.Millisecond)
	m.Answered("simple", ProtocolGRPC, time.Millisecond)
	m.latencyOf("simple").Observe(0.001)
	m.Failed("simple", ProtocolGRPC, "InvalidArgument")
	m.Passthrough.Inc()
	m.Passed(ProtocolGRPC, true)
	got := m.Doors()
	want := map[string]DoorCounts{
		ProtocolHTTP: {Batched: 1, Passthrough: 1},
		ProtocolGRPC: {Batched: 2, Errors: 1, Passthrough: 1, PassthroughErrors: 1},
	}
	for door, w := range want {
		if got[door] != w {
			t.Errorf("%s: got %+v, want %+v", door, got[door], w)
		}
	}
}

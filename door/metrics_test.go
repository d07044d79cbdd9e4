package door

import (
	"testing"
	"time"
)

func TestDoorsCountPerProtocol(t *testing.T) {
	m := NewMetrics(nil)
	h, g := New(Backend{Metrics: m}, HTTP), New(Backend{Metrics: m}, GRPC)
	a := Admission{d: g, Model: "simple", Start: time.Now()}
	g.latencyOf(a.Model).Observe(0.001)
	g.latencyOf(a.Model).Observe(0.001)
	h.latencyOf("simple").Observe(0.001)
	g.Failed("simple", "InvalidArgument")
	h.Passed()
	g.Passed()
	g.PassFailed()
	got := m.Doors()
	want := map[string]DoorCounts{
		string(HTTP): {Batched: 1, Passthrough: 1},
		string(GRPC): {Batched: 2, Errors: 1, Passthrough: 1, PassthroughErrors: 1},
	}
	for door, w := range want {
		if got[door] != w {
			t.Errorf("%s: got %+v, want %+v", door, got[door], w)
		}
	}
}

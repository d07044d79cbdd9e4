package policy

import (
	"strings"
	"testing"
)

func TestElasticDecide(t *testing.T) {
	e := estimate(10)
	e.Instances = 3
	rule := Elastic{RowCap: 20}.Plan(e)
	q := func(rows, inFlight, inFlightRows int) Queue {
		return Queue{Now: at(0), Rows: rows, OldestArrival: at(0), InFlight: inFlight, InFlightRows: inFlightRows, Instances: 3, MaxBatch: 32}
	}
	tests := []struct {
		name string
		rule Rule
		q    Queue
		want Decision
	}{
		{"idle server takes up to the cap", rule, q(50, 0, 0), Send(20)},
		{"a lone request goes at once", rule, q(1, 0, 0), Send(1)},
		{"a second batch starts beside a running one", rule, q(4, 1, 10), Send(4)},
		{"the second batch fills the room under the cap", rule, q(30, 1, 12), Send(8)},
		{"no room under the cap waits", rule, q(3, 1, 20), Wait()},
		{"all instances busy waits", rule, q(3, 3, 6), Wait()},
		{"empty queue waits", rule, q(0, 0, 0), Wait()},
		{"default cap is B_max", Elastic{}.Plan(e), q(100, 0, 0), Send(32)},
		{"default cap leaves room beside a small batch", Elastic{}.Plan(e), q(100, 1, 5), Send(27)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.Decide(tt.q); got != tt.want {
				t.Fatalf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
	st := rule.Status()
	if st.Policy != NameElastic || st.BatchSize != 20 || !strings.Contains(st.Note, "3 batches") {
		t.Fatalf("Status = %+v", st)
	}
}

func TestElasticOptions(t *testing.T) {
	p, err := New(NameElastic, NewOptions(ElasticOptions{RowCap: 48}))
	if err != nil || p.(Elastic).RowCap != 48 {
		t.Fatalf("New = %+v, %v", p, err)
	}
	if _, err := New(NameElastic, NewOptions(ElasticOptions{RowCap: -1})); err == nil || !strings.Contains(err.Error(), "row_cap") {
		t.Fatalf("row_cap -1: error %v", err)
	}
}

package dispatcher

import (
	"testing"
	"time"
)

func TestEarliestDeadline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time {
		if ms < 0 {
			return time.Time{}
		}
		return t0.Add(time.Duration(ms) * time.Millisecond)
	}
	tests := []struct {
		name      string
		deadlines []int // ms after t0 per call, in queue order; -1: none
		priority  []uint64
		cancel    []int // indexes withdrawn
		want      int   // -1: none
	}{
		{"no deadlines", []int{-1, -1}, nil, nil, -1},
		{"only the head", []int{30, -1}, nil, nil, 30},
		{"only a later call", []int{-1, -1, 20}, nil, nil, 20},
		{"several, earliest in the middle", []int{50, 10, 40, 30}, nil, nil, 10},
		{"head is not the earliest", []int{50, -1, 5}, nil, nil, 5},
		{"the earliest withdrawn", []int{50, 10, 40}, nil, []int{1}, 40},
		{"all with deadlines withdrawn", []int{50, -1, 10}, nil, []int{0, 2}, -1},
		{"across priority levels", []int{50, 7, 40}, []uint64{0, 2, 1}, nil, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := &keyQueue{}
			calls := make([]*Call, len(tt.deadlines))
			for i, ms := range tt.deadlines {
				c := &Call{Rows: 1, Deadline: at(ms), level: ^uint64(0)}
				if tt.priority != nil && tt.priority[i] != 0 {
					c.level = tt.priority[i]
				}
				calls[i] = c
				k.push(c)
			}
			for _, i := range tt.cancel {
				calls[i].state.Store(stateCancelled)
				k.cancel(calls[i])
			}
			got := k.earliestDeadline(k.head())
			if !got.Equal(at(tt.want)) {
				t.Fatalf("earliestDeadline = %v, want %v", got, at(tt.want))
			}
		})
	}
}

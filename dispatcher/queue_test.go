package dispatcher

import (
	"slices"
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

// A key queue that empties keeps the array of its last level for the next
// one: rounds of pushes at changing priority levels, some withdrawn, come
// out by level, FIFO within a level, with nothing of an earlier round left.
func TestKeyQueueReusesEmptiedLevels(t *testing.T) {
	rounds := []struct {
		levels []uint64 // per call, in push order
		cancel []int
		want   []int // push indexes in take order
	}{
		{[]uint64{5, 5, 5}, nil, []int{0, 1, 2}},
		{[]uint64{9, 1, 9, 1}, nil, []int{1, 3, 0, 2}},
		{[]uint64{3}, []int{0}, nil},
		{[]uint64{2, 7, 2}, []int{1}, []int{0, 2}},
		{[]uint64{4, 4}, nil, []int{0, 1}},
	}
	k := &keyQueue{}
	var reused int
	for r, tt := range rounds {
		calls := make([]*Call, len(tt.levels))
		for i, lv := range tt.levels {
			calls[i] = &Call{Rows: 1, level: lv}
			if k.spare != nil && len(k.levels) == 0 {
				reused++
			}
			k.push(calls[i])
		}
		for _, i := range tt.cancel {
			calls[i].state.Store(stateCancelled)
			k.cancel(calls[i])
		}
		got, rows := k.take(100, nil)
		if rows != len(tt.want) || len(got) != len(tt.want) {
			t.Fatalf("round %d: took %d calls (%d rows), want %d", r, len(got), rows, len(tt.want))
		}
		for j, c := range got {
			if c != calls[tt.want[j]] {
				t.Fatalf("round %d: call %d out of order", r, j)
			}
		}
		if k.head() != nil || k.rows != 0 || len(k.levels) != 0 {
			t.Fatalf("round %d: queue not empty after taking all (%d rows, %d levels)", r, k.rows, len(k.levels))
		}
		if slices.ContainsFunc(k.spare[:cap(k.spare)], func(c *Call) bool { return c != nil }) {
			t.Fatalf("round %d: the spare array still holds calls", r)
		}
	}
	if reused == 0 {
		t.Fatal("no round started from the spare array")
	}
}

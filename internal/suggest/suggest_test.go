package suggest

import "testing"

func TestClosest(t *testing.T) {
	names := []string{"serve", "sim", "demo", "load", "latency_budget", "tail_budget", "window", "wait_bound"}
	for _, tc := range []struct{ in, want string }{
		{"serv", "serve"},   // a unique prefix
		{"srve", "serve"},   // one deletion
		{"windw", "window"}, // one deletion
		{"latency_budge", "latency_budget"},
		{"latencybudget", "latency_budget"},
		{"se", "serve"},         // the only name it prefixes
		{"nothing_like_it", ""}, // too far
		{"wait_bond", "wait_bound"},
	} {
		if got := Closest(tc.in, names); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"window", "windw", 1}, {"same", "same", 0},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want || Distance(tc.b, tc.a) != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d both ways", tc.a, tc.b, got, tc.want)
		}
	}
}

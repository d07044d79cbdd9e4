package whatif

import (
	"strings"
	"testing"
)

func pt(label string, mean, p99, rpj float64) Point {
	return Point{Label: label, MeanMs: mean, P99Ms: p99, RequestsPerJoule: &rpj}
}

// The front holds the settings no other beats on mean, p99 and
// requests per joule at once; the recommendation is the most efficient
// of them within the setting in force's mean and p99, or within a p99
// asked for.
func TestFrontAndRecommendation(t *testing.T) {
	points := func() []Point {
		cur := pt("in force", 2, 5, 10)
		cur.Current = true
		return []Point{
			cur,
			pt("adhoc", 1.8, 4.5, 9.5),
			pt("better in all", 1.9, 4.9, 10.5),   // beats the one in force
			pt("slower, cheaper", 4, 9, 12),       // on the front
			pt("dominated", 4.5, 9.5, 11),         // by "slower, cheaper"
			{Label: "failed", Error: "no policy"}, // not compared
		}
	}
	for _, tc := range []struct {
		name      string
		p99       float64
		want      string
		wantFront []string
	}{
		{"within the setting in force", 0, "better in all", []string{"adhoc", "better in all", "slower, cheaper"}},
		{"within a p99 of 10 ms", 10, "slower, cheaper", nil},
		{"within a p99 below every setting's", 1, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Report{Points: points()}
			mark(&rep, tc.p99)
			var front []string
			for _, p := range rep.Points {
				if p.Front {
					front = append(front, p.Label)
				}
			}
			if tc.wantFront != nil && strings.Join(front, ",") != strings.Join(tc.wantFront, ",") {
				t.Errorf("front %v, want %v", front, tc.wantFront)
			}
			got := ""
			if rep.Recommended >= 0 {
				got = rep.Points[rep.Recommended].Label
			}
			if got != tc.want || rep.Recommendation == "" {
				t.Errorf("recommended %q (%s), want %q", got, rep.Recommendation, tc.want)
			}
		})
	}
	// Without an energy line the front trades latency for the GPU's idle
	// share.
	a, b := Point{Label: "a", MeanMs: 1, P99Ms: 2, BusyShare: 0.5}, Point{Label: "b", MeanMs: 2, P99Ms: 3, BusyShare: 0.6}
	rep := Report{Points: []Point{a, b}}
	mark(&rep, 0)
	if rep.Efficiency != EfficiencyIdle || !rep.Points[0].Front || rep.Points[1].Front {
		t.Errorf("without energy: axis %s, front %v %v; want idle share, a only", rep.Efficiency, rep.Points[0].Front, rep.Points[1].Front)
	}
}

package trace

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestPaper300Shape(t *testing.T) {
	s, err := Lookup(Paper300)
	if err != nil {
		t.Fatal(err)
	}
	if s.Duration() != 300*time.Second {
		t.Fatalf("duration %v, want 300s", s.Duration())
	}
	lo, hi := math.Inf(1), 0.0
	for t0 := time.Duration(0); t0 <= s.Duration(); t0 += 100 * time.Millisecond {
		r := s.RateAt(t0)
		lo, hi = math.Min(lo, r), math.Max(hi, r)
	}
	if lo != 1 || hi != 240 || s.MaxRate() != 240 {
		t.Fatalf("rate range [%v, %v], max %v; want [1, 240]", lo, hi, s.MaxRate())
	}
	if Shape(Paper300) == "" || !strings.Contains(Shape(Paper300), "240") {
		t.Fatalf("shape text %q", Shape(Paper300))
	}
}

func TestRateAt(t *testing.T) {
	s, err := New("t", []Point{{0, 10}, {10 * time.Second, 30}, {20 * time.Second, 0}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		at   time.Duration
		want float64
	}{
		{-time.Second, 10}, {0, 10}, {5 * time.Second, 20}, {10 * time.Second, 30},
		{15 * time.Second, 15}, {20 * time.Second, 0}, {time.Hour, 0},
	}
	for _, tt := range tests {
		if got := s.RateAt(tt.at); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("RateAt(%v) = %v, want %v", tt.at, got, tt.want)
		}
	}
	if got := s.Expected(); math.Abs(got-(200+150)) > 1e-9 {
		t.Fatalf("Expected = %v, want 350", got)
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		pts  []Point
		want string
	}{
		{"one point", []Point{{0, 1}}, "at least 2"},
		{"late start", []Point{{time.Second, 1}, {2 * time.Second, 1}}, "time 0"},
		{"not increasing", []Point{{0, 1}, {time.Second, 1}, {time.Second, 2}}, "point 3"},
		{"negative rate", []Point{{0, 1}, {time.Second, -1}}, "point 2: rate"},
		{"NaN rate", []Point{{0, math.NaN()}, {time.Second, 1}}, "point 1: rate"},
	}
	for _, tt := range tests {
		if _, err := New("x", tt.pts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to mention %q", tt.name, err, tt.want)
		}
	}
	if _, err := Lookup("nope"); err == nil || !strings.Contains(err.Error(), Paper300) {
		t.Errorf("unknown trace error %v should list the built-ins", err)
	}
}

// Arrivals follow the series: counts per segment match the rate integral
// within Poisson noise, and nothing arrives after the end or in a zero-rate
// stretch.
func TestArrivalsFollowRate(t *testing.T) {
	s, _ := New("t", []Point{
		{0, 0}, {10 * time.Second, 0}, // silent
		{20 * time.Second, 2000}, // ramp up: 10000 expected
		{30 * time.Second, 2000}, // flat: 20000 expected
		{40 * time.Second, 0},    // ramp down: 10000 expected
	})
	counts := make([]int, 4)
	var rampLate int
	a := s.Arrivals(rand.New(rand.NewPCG(7, 8)))
	last := time.Duration(-1)
	for {
		at, ok := a.Next()
		if !ok {
			break
		}
		if at <= last {
			t.Fatalf("arrival %v not after %v", at, last)
		}
		if at > s.Duration() {
			t.Fatalf("arrival %v after the end", at)
		}
		last = at
		counts[int(at/(10*time.Second))%4]++
		if at >= 15*time.Second && at < 20*time.Second {
			rampLate++
		}
	}
	want := []float64{0, 10000, 20000, 10000}
	for i, w := range want {
		if d := math.Abs(float64(counts[i]) - w); d > 4*math.Sqrt(math.Max(w, 1)) {
			t.Errorf("segment %d: %d arrivals, want %v ± 4 sd", i, counts[i], w)
		}
	}
	// The ramp's arrivals lean late: its second half holds 3/4 of them.
	if f := float64(rampLate) / float64(counts[1]); math.Abs(f-0.75) > 0.02 {
		t.Errorf("ramp: %.3f of arrivals in its second half, want 0.75", f)
	}
	if _, ok := a.Next(); ok {
		t.Fatal("Next after the end must report false")
	}
}

func TestArrivalsDeterministic(t *testing.T) {
	s, _ := Lookup(Paper300)
	draw := func() []time.Duration {
		var out []time.Duration
		a := s.Arrivals(rand.New(rand.NewPCG(1, 1)))
		for at, ok := a.Next(); ok && len(out) < 1000; at, ok = a.Next() {
			out = append(out, at)
		}
		return out
	}
	x, y := draw(), draw()
	if len(x) != 1000 || len(y) != 1000 {
		t.Fatalf("draw lengths %d %d", len(x), len(y))
	}
	for i := range x {
		if x[i] != y[i] {
			t.Fatalf("arrival %d differs: %v vs %v", i, x[i], y[i])
		}
	}
}

func TestCompressScale(t *testing.T) {
	s, _ := Lookup(Paper300)
	c, err := s.Compress(10)
	if err != nil {
		t.Fatal(err)
	}
	if c.Duration() != 30*time.Second || c.MaxRate() != 240 || c.RateAt(13*time.Second) != s.RateAt(130*time.Second) {
		t.Fatalf("compressed: duration %v max %v", c.Duration(), c.MaxRate())
	}
	if math.Abs(c.Expected()-s.Expected()/10) > 1e-6 {
		t.Fatalf("compressed expected %v, want %v", c.Expected(), s.Expected()/10)
	}
	k, err := s.Scale(2)
	if err != nil || k.MaxRate() != 480 || k.Duration() != s.Duration() {
		t.Fatalf("scaled: %v max %v", err, k.MaxRate())
	}
	for _, f := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if _, err := s.Compress(f); err == nil {
			t.Errorf("Compress(%v) must fail", f)
		}
	}
	if _, err := s.Scale(-1); err == nil {
		t.Error("Scale(-1) must fail")
	}
	if m := s.MeanRate(); math.Abs(m-s.Expected()/300) > 1e-9 {
		t.Errorf("MeanRate %v", m)
	}
}

func TestCSV(t *testing.T) {
	s, _ := Lookup(Paper300)
	var buf bytes.Buffer
	if err := WriteCSV(&buf, s); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCSV(&buf, "copy")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := back.Points(), s.Points(); len(got) != len(want) {
		t.Fatalf("round trip: %d points, want %d", len(got), len(want))
	} else {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("point %d = %+v, want %+v", i, got[i], want[i])
			}
		}
	}
	bad := []struct{ in, want string }{
		{"", "empty"},
		{"t,r\n0,1\n", "must name columns"},
		{"time_s,rate_rps\n0,1\nx,2\n", "line 3: time_s"},
		{"time_s,rate_rps\n0,1\n1,fast\n", "line 3: rate_rps"},
		{"time_s,rate_rps\n0,1\n-1,2\n", "line 3"},
		{"time_s,rate_rps\n0,1\n", "at least 2"},
		{"time_s,rate_rps\n0,1\n2,1\n1,1\n", "point 3"},
	}
	for _, b := range bad {
		if _, err := ReadCSV(strings.NewReader(b.in), "x"); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("ReadCSV(%q): error %v, want it to mention %q", b.in, err, b.want)
		}
	}
}

func TestConstant(t *testing.T) {
	c, err := Constant(50, time.Minute)
	if err != nil || c.RateAt(30*time.Second) != 50 || c.Expected() != 3000 {
		t.Fatalf("constant: %v", err)
	}
	if _, err := Constant(1, 0); err == nil {
		t.Fatal("zero duration must fail")
	}
}

// FuzzReadCSV: any input is read into a valid series or rejected, and a
// series read draws arrivals inside its span.
func FuzzReadCSV(f *testing.F) {
	f.Add("time_s,rate_rps\n0,1\n1,5\n")
	f.Add("rate_rps,time_s\n3,0\n0,1e-9\n")
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ReadCSV(strings.NewReader(in), "fuzz")
		if err != nil {
			return
		}
		if s.Expected() > 1e5 {
			return // too many arrivals to draw in a fuzz iteration
		}
		a := s.Arrivals(rand.New(rand.NewPCG(1, 2)))
		for i := 0; i < 1000; i++ {
			at, ok := a.Next()
			if !ok {
				break
			}
			if at < 0 || at > s.Duration() {
				t.Fatalf("arrival %v outside [0, %v]", at, s.Duration())
			}
		}
	})
}

// The bursty built-ins are what their shapes say: on/off alternates its two
// rates every 500 ms, the MMPP spends about a third of its time high, and
// both average what their descriptions state.
func TestBurstyShapes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mean     float64 // req/s, from the shape's text
		tol      float64
		hi, lo   float64
		highFrac float64
	}{
		{OnOff, 710, 0.01, 1400, 20, 0.5},
		{MMPP, 600, 0.15, 1400, 200, 1.0 / 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Lookup(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if s.Duration() != 60*time.Second {
				t.Fatalf("lasts %v, want 60s", s.Duration())
			}
			if m := s.MeanRate(); math.Abs(m/tc.mean-1) > tc.tol {
				t.Errorf("mean %.1f req/s, want %.0f ± %.0f%%", m, tc.mean, 100*tc.tol)
			}
			high, n := 0, 0
			for at := time.Duration(0); at < s.Duration(); at += time.Millisecond {
				switch r := s.RateAt(at + time.Millisecond/2); r {
				case tc.hi:
					high++
				case tc.lo:
				default:
					t.Fatalf("rate %v at %v: neither %v nor %v", r, at, tc.hi, tc.lo)
				}
				n++
			}
			if f := float64(high) / float64(n); math.Abs(f-tc.highFrac) > 0.1 {
				t.Errorf("high %.2f of the time, want %.2f", f, tc.highFrac)
			}
			if tc.name == OnOff && (s.RateAt(250*time.Millisecond) != tc.hi || s.RateAt(750*time.Millisecond) != tc.lo) {
				t.Error("on/off does not start with 500 ms on then 500 ms off")
			}
		})
	}
}

// The recorded trace is the file's counts: its requests, its length, its
// busiest second and its silences, each second at its own count.
func TestAzure2023(t *testing.T) {
	s, err := Lookup(Azure2023)
	if err != nil {
		t.Fatal(err)
	}
	if d := s.Duration(); d != 3436*time.Second {
		t.Errorf("duration %v, want 3436 s", d)
	}
	if n := s.Expected(); math.Abs(n-8819) > 0.1 {
		t.Errorf("expected arrivals %.2f, want the trace's 8,819", n)
	}
	if m := s.MaxRate(); m != 67 {
		t.Errorf("busiest second %v req/s, want 67", m)
	}
	silent := 0
	for i := range 3436 {
		if s.RateAt(time.Duration(i)*time.Second+time.Second/2) == 0 {
			silent++
		}
	}
	if silent != 2521 {
		t.Errorf("%d seconds without an arrival, want 2,521", silent)
	}
	if !strings.Contains(Shape(Azure2023), "CC-BY 4.0") {
		t.Errorf("the trace's description does not state its licence: %q", Shape(Azure2023))
	}
}

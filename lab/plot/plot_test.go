package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// parse checks that out is well-formed XML and counts its elements by name.
func parse(t *testing.T, out []byte) map[string]int {
	t.Helper()
	count := map[string]int{}
	d := xml.NewDecoder(bytes.NewReader(out))
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return count
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, out)
		}
		if se, ok := tok.(xml.StartElement); ok {
			count[se.Name.Local]++
		}
	}
}

func TestWriteSVG(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name      string
		fig       Figure
		polylines int
		circles   int
		contains  []string
	}{
		{
			name: "two series with markers",
			fig: Figure{Title: "latency <vs> load", XLabel: "rho", YLabel: "ms", Series: []Series{
				{Name: "adhoc", X: []float64{0.1, 0.5, 0.9}, Y: []float64{1, 3, 18}},
				{Name: "a&b", X: []float64{0.1, 0.5, 0.9}, Y: []float64{2, 4, 40}},
			}},
			polylines: 2, circles: 6,
			contains: []string{"latency &lt;vs&gt; load", "a&amp;b", ">rho<", ">0.8<"},
		},
		{
			name: "NaN breaks the line and is not drawn",
			fig: Figure{Title: "gap", Series: []Series{
				{Name: "s", X: []float64{1, 2, 3, 4, 5}, Y: []float64{1, 2, nan, 4, 5}},
			}},
			polylines: 2, circles: 4,
		},
		{
			name: "log axis drops non-positive values and labels decades",
			fig: Figure{Title: "log", LogY: true, Series: []Series{
				{Name: "s", X: []float64{1, 2, 3, 4}, Y: []float64{0, 1, 100, 10000}},
			}},
			polylines: 1, circles: 3,
			contains: []string{">1<", ">100<", ">1e+04<"},
		},
		{
			name: "a long series gets no markers",
			fig: Figure{Title: "long", Series: []Series{
				{Name: "s", X: seq(100), Y: seq(100)},
			}},
			polylines: 1, circles: 0,
		},
		{
			name: "fixed colour and dash are honoured and escaped",
			fig: Figure{Title: "style", Series: []Series{
				{Name: "s", X: []float64{1, 2}, Y: []float64{1, 2}, Color: `#123456"`, Dashed: true},
			}},
			polylines: 1, circles: 2,
			contains: []string{`stroke="#123456&#34;"`, `stroke-dasharray="6 3"`},
		},
		{
			name: "a single point widens the axes",
			fig: Figure{Title: "one", Series: []Series{
				{Name: "s", X: []float64{3}, Y: []float64{7}},
			}},
			polylines: 0, circles: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.fig.WriteSVG(&buf); err != nil {
				t.Fatal(err)
			}
			n := parse(t, buf.Bytes())
			if n["svg"] != 1 || n["polyline"] != tt.polylines || n["circle"] != tt.circles {
				t.Fatalf("got %d svg, %d polylines, %d circles; want 1, %d, %d", n["svg"], n["polyline"], n["circle"], tt.polylines, tt.circles)
			}
			for _, s := range tt.contains {
				if !strings.Contains(buf.String(), s) {
					t.Errorf("output lacks %q", s)
				}
			}
		})
	}
}

func TestWriteSVGRejects(t *testing.T) {
	tests := []struct {
		name string
		fig  Figure
		want string
	}{
		{"no series", Figure{Title: "t"}, "no series"},
		{"length mismatch", Figure{Title: "t", Series: []Series{{Name: "s", X: []float64{1, 2}, Y: []float64{1}}}}, `("s") has 2 x values and 1 y values`},
		{"nothing finite", Figure{Title: "t", Series: []Series{{Name: "s", X: []float64{1}, Y: []float64{math.Inf(1)}}}}, "no finite point"},
		{"nothing positive on a log axis", Figure{Title: "t", LogY: true, Series: []Series{{Name: "s", X: []float64{1}, Y: []float64{0}}}}, "no finite point"},
		{"negative size", Figure{Title: "t", Width: -1, Series: []Series{{Name: "s", X: []float64{1}, Y: []float64{1}}}}, "size must be >= 0"},
		{"too small", Figure{Title: "t", Width: 100, Height: 100, Series: []Series{{Name: "s", X: []float64{1}, Y: []float64{1}}}}, "no room"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.fig.WriteSVG(io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestTicksCoverTheData(t *testing.T) {
	ranges := [][2]float64{{0, 1}, {0.1, 0.9}, {1.3, 1.31}, {-5, 17}, {0, 2960}, {1e-4, 3e-4}, {12345, 98765}}
	for _, r := range ranges {
		ticks := linearTicks(r[0], r[1])
		if len(ticks) < 2 || len(ticks) > 12 {
			t.Fatalf("%v: %d ticks", r, len(ticks))
		}
		if ticks[0].v > r[0] || ticks[len(ticks)-1].v < r[1] {
			t.Fatalf("%v: ticks %v..%v do not cover the range", r, ticks[0].v, ticks[len(ticks)-1].v)
		}
		for i := 1; i < len(ticks); i++ {
			if ticks[i].label == ticks[i-1].label {
				t.Fatalf("%v: repeated label %q", r, ticks[i].label)
			}
		}
	}
	for _, r := range [][2]float64{{1, 1000}, {1.5, 18}, {0.02, 0.5}, {3, 3.2}} {
		ticks := logTicks(r[0], r[1])
		if len(ticks) < 2 || ticks[0].v > r[0] || ticks[len(ticks)-1].v < r[1] {
			t.Fatalf("log %v: ticks %+v do not cover the range", r, ticks)
		}
	}
}

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i)
	}
	return out
}

func BenchmarkWriteSVG(b *testing.B) {
	f := Figure{Title: "bench", XLabel: "t", YLabel: "y"}
	for s := range 5 {
		ys := seq(300)
		for i := range ys {
			ys[i] = float64(s) + math.Sin(float64(i)/10)
		}
		f.Series = append(f.Series, Series{Name: "s", X: seq(300), Y: ys})
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := f.WriteSVG(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLegendLogAndRange: a series with nothing to draw gets no legend entry,
// a logarithmic axis says so, and a fixed x range overrides the data's.
func TestLegendLogAndRange(t *testing.T) {
	f := Figure{Title: "t", XLabel: "time (s)", YLabel: "ms", LogY: true, XMin: 0, XMax: 80,
		Series: []Series{
			{Name: "drawn", X: []float64{0, 10, 20}, Y: []float64{1, 2, 3}},
			{Name: "empty-run", X: []float64{0, 10}, Y: []float64{math.NaN(), math.NaN()}},
		}}
	var b bytes.Buffer
	if err := f.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	if strings.Contains(svg, ">empty-run<") {
		t.Error("a series without points has a legend entry")
	}
	if !strings.Contains(svg, ">drawn<") {
		t.Error("the drawn series lost its legend entry")
	}
	if !strings.Contains(svg, "ms (log scale)") {
		t.Error("the logarithmic axis does not say so")
	}
	if !strings.Contains(svg, ">80<") {
		t.Error("the x axis does not reach the fixed XMax 80")
	}
}

// TestFixedRangeIsNotStretched: a fixed x range ends the axis where it is
// set, not at the next round tick (a 62 s run drawn to 80 s squeezes it).
func TestFixedRangeIsNotStretched(t *testing.T) {
	f := Figure{Title: "t", XLabel: "time (s)", YLabel: "y", XMin: 0, XMax: 62,
		Series: []Series{{Name: "run", X: []float64{0, 31, 62}, Y: []float64{1, 2, 3}}}}
	var b bytes.Buffer
	if err := f.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	if strings.Contains(svg, ">80<") || !strings.Contains(svg, ">60<") {
		t.Errorf("x ticks: want 60 as the last, no 80:\n%s", svg)
	}
	// The last point sits on the right edge of the frame.
	right := float64(DefaultWidth - legendWidth)
	if !strings.Contains(svg, fmt.Sprintf("%.1f,", right)) {
		t.Errorf("no point at the frame's right edge x=%.1f: the axis does not end at 62", right)
	}
}

// TestPaletteDistinct: the first six colours (a demo's six policies) are
// far apart in CIELAB (CIE76 distance), and each stands out from the white
// background.
func TestPaletteDistinct(t *testing.T) {
	for i := range 6 {
		if d := deltaE(palette[i], "#FFFFFF"); d < 45 {
			t.Errorf("%s is %.0f from white, want >= 45", palette[i], d)
		}
		for j := range i {
			if d := deltaE(palette[i], palette[j]); d < 50 {
				t.Errorf("%s and %s are %.0f apart, want >= 50", palette[i], palette[j], d)
			}
		}
	}
}

// deltaE is the CIE76 distance of two #RRGGBB colours (sRGB, D65).
func deltaE(a, b string) float64 {
	la, lb := lab(a), lab(b)
	return math.Sqrt((la[0]-lb[0])*(la[0]-lb[0]) + (la[1]-lb[1])*(la[1]-lb[1]) + (la[2]-lb[2])*(la[2]-lb[2]))
}

func lab(hex string) [3]float64 {
	var rgb [3]float64
	for i := range 3 {
		v, _ := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		c := float64(v) / 255
		if c > 0.04045 {
			c = math.Pow((c+0.055)/1.055, 2.4)
		} else {
			c /= 12.92
		}
		rgb[i] = c
	}
	r, g, bl := rgb[0], rgb[1], rgb[2]
	x := (0.4124*r + 0.3576*g + 0.1805*bl) / 0.95047
	y := 0.2126*r + 0.7152*g + 0.0722*bl
	z := (0.0193*r + 0.1192*g + 0.9505*bl) / 1.08883
	f := func(v float64) float64 {
		if v > 0.008856 {
			return math.Cbrt(v)
		}
		return 7.787*v + 16.0/116
	}
	return [3]float64{116*f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))}
}

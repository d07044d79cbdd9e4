// Package plot writes simple line plots as SVG with the standard library
// only, so that reports (ratebatch compare, ratebatch report) can carry
// figures that any browser or GitHub renders, without a plotting toolchain.
//
// A Figure is axes, ticks, a legend and one polyline per Series. That is
// all: no styling knobs beyond the size and a logarithmic y axis, so that
// every figure of the project looks the same.
package plot

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Series is one named line. X and Y have the same length; a point with a
// non-finite coordinate (or y <= 0 on a logarithmic axis) is left out and
// breaks the line there.
type Series struct {
	Name string
	X, Y []float64
	// Color is an SVG colour ("#0072B2"); empty picks the palette's colour
	// for the series' position. Set it to keep one colour per name across
	// figures that show different subsets.
	Color string
	// Dashed draws the line dashed, so that a series lying on top of
	// another stays visible.
	Dashed bool
}

// Figure is one line plot.
type Figure struct {
	Title, XLabel, YLabel string
	Series                []Series
	// LogY draws the y axis in powers of ten, for quantities that span
	// orders of magnitude (latency from light load to saturation).
	LogY bool
	// Width and Height are the size in pixels; 0 selects 720 x 420.
	Width, Height int
	// XMin and XMax fix the x axis when XMax > XMin, so that figures over
	// the same time share one range; otherwise the data decide.
	XMin, XMax float64
}

// Default size and layout, in pixels.
const (
	DefaultWidth  = 720
	DefaultHeight = 420

	marginLeft   = 64
	marginTop    = 36
	marginBottom = 48
	legendWidth  = 168
	markerMax    = 40 // series with at most this many points get markers
)

// palette is mostly Okabe-Ito's colour-blind friendly set, ordered so that
// the first six are far apart (CIE76 distance >= 50, TestPaletteDistinct):
// Okabe-Ito's vermilion beside its orange, or its sky blue beside its blue,
// could not be told apart in a six-policy demo. Series beyond its length
// reuse it with a dashed line.
var palette = []string{
	"#0072B2", "#E69F00", "#000000", "#CC79A7", "#009E73",
	"#E31A1C", "#56B4E9", "#D55E00", "#7F3C8D", "#F0E442",
}

// Validate reports the first thing that makes the figure unplottable.
func (f Figure) Validate() error {
	if f.Width < 0 || f.Height < 0 {
		return fmt.Errorf("plot %q: size must be >= 0, got %dx%d", f.Title, f.Width, f.Height)
	}
	if w, h := f.size(); w-marginLeft-legendWidth < 50 || h-marginTop-marginBottom < 50 {
		return fmt.Errorf("plot %q: %dx%d pixels leave no room for the axes", f.Title, w, h)
	}
	if len(f.Series) == 0 {
		return fmt.Errorf("plot %q: no series", f.Title)
	}
	any := false
	for i, s := range f.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("plot %q: series %d (%q) has %d x values and %d y values", f.Title, i, s.Name, len(s.X), len(s.Y))
		}
		for j := range s.X {
			if f.usable(s.X[j], s.Y[j]) {
				any = true
			}
		}
	}
	if !any {
		return fmt.Errorf("plot %q: no finite point to draw", f.Title)
	}
	return nil
}

func (f Figure) size() (int, int) {
	w, h := f.Width, f.Height
	if w == 0 {
		w = DefaultWidth
	}
	if h == 0 {
		h = DefaultHeight
	}
	return w, h
}

// drawable reports whether s has a point to draw.
func (f Figure) drawable(s Series) bool {
	for j := range s.X {
		if f.usable(s.X[j], s.Y[j]) {
			return true
		}
	}
	return false
}

func (f Figure) usable(x, y float64) bool {
	ok := !math.IsNaN(x) && !math.IsInf(x, 0) && !math.IsNaN(y) && !math.IsInf(y, 0)
	return ok && (!f.LogY || y > 0)
}

// WriteSVG writes the figure as a standalone SVG document.
func (f Figure) WriteSVG(w io.Writer) error {
	if err := f.Validate(); err != nil {
		return err
	}
	width, height := f.size()
	x0, x1, y0, y1 := f.bounds()
	xt := linearTicks(x0, x1)
	var yt []tick
	if f.LogY {
		yt = logTicks(y0, y1)
	} else {
		yt = linearTicks(y0, y1)
	}
	// The axes span the ticks, so that the outermost ticks sit on them;
	// except a fixed x range, which stays as set (a 62 s run's axis ends at
	// 62 s, not at the 80 s tick beyond it).
	if inside := ticksWithin(xt, x0, x1); f.XMax > f.XMin && len(inside) >= 2 {
		xt = inside
	} else {
		x0, x1 = min(x0, xt[0].v), max(x1, xt[len(xt)-1].v)
	}
	y0, y1 = min(y0, yt[0].v), max(y1, yt[len(yt)-1].v)

	left, top := float64(marginLeft), float64(marginTop)
	right := float64(width - legendWidth)
	bottom := float64(height - marginBottom)
	px := func(x float64) float64 { return left + (x-x0)/(x1-x0)*(right-left) }
	py := func(y float64) float64 {
		if f.LogY {
			return bottom - (math.Log10(y)-math.Log10(y0))/(math.Log10(y1)-math.Log10(y0))*(bottom-top)
		}
		return bottom - (y-y0)/(y1-y0)*(bottom-top)
	}

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(b, `<text x="%g" y="22" text-anchor="middle" font-size="14" font-weight="bold">%s</text>`+"\n",
		(left+right)/2, esc(f.Title))

	// Grid and ticks.
	for _, t := range xt {
		x := px(t.v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", x, top, x, bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, bottom+16, esc(t.label))
	}
	for _, t := range yt {
		y := py(t.v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", left, y, right, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, y, esc(t.label))
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", left, top, right-left, bottom-top)
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", (left+right)/2, height-10, esc(f.XLabel))
	ylabel := f.YLabel
	if f.LogY && !strings.Contains(strings.ToLower(ylabel), "log") {
		ylabel += " (log scale)" // a reader must not take the spacing as linear
	}
	fmt.Fprintf(b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (top+bottom)/2, esc(ylabel))

	// Lines, then the legend. A series with nothing to draw gets no legend
	// entry: a name beside no line only misleads.
	entry := 0
	for i, s := range f.Series {
		color, dash := style(i)
		if s.Color != "" {
			color = esc(s.Color)
		}
		if s.Dashed {
			dash = ` stroke-dasharray="6 3"`
		}
		var pts []string
		flush := func() {
			if len(pts) > 1 {
				fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2.2"%s points="%s"/>`+"\n", color, dash, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for j := range s.X {
			if !f.usable(s.X[j], s.Y[j]) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[j]), py(s.Y[j])))
		}
		flush()
		if len(s.X) <= markerMax {
			for j := range s.X {
				if f.usable(s.X[j], s.Y[j]) {
					fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", px(s.X[j]), py(s.Y[j]), color)
				}
			}
		}
		if !f.drawable(s) {
			continue
		}
		ly := top + 8 + float64(entry)*18
		entry++
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", right+12, ly, right+36, ly, color, dash)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" dominant-baseline="middle">%s</text>`+"\n", right+42, ly, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.Flush()
}

// bounds returns the data range, widened when it is a single value.
func (f Figure) bounds() (x0, x1, y0, y1 float64) {
	x0, y0 = math.Inf(1), math.Inf(1)
	x1, y1 = math.Inf(-1), math.Inf(-1)
	for _, s := range f.Series {
		for j := range s.X {
			if f.usable(s.X[j], s.Y[j]) {
				x0, x1 = min(x0, s.X[j]), max(x1, s.X[j])
				y0, y1 = min(y0, s.Y[j]), max(y1, s.Y[j])
			}
		}
	}
	x0, x1 = widen(x0, x1, false)
	if f.XMax > f.XMin {
		x0, x1 = f.XMin, f.XMax
	}
	y0, y1 = widen(y0, y1, f.LogY)
	if !f.LogY && y0 > 0 && y0 < 0.5*y1 {
		y0 = 0 // a positive quantity reads best from zero
	}
	return x0, x1, y0, y1
}

func widen(lo, hi float64, log bool) (float64, float64) {
	if hi > lo {
		return lo, hi
	}
	if log {
		return lo / 2, hi * 2
	}
	d := math.Abs(lo) / 2
	if d == 0 {
		d = 1
	}
	return lo - d, hi + d
}

type tick struct {
	v     float64
	label string
}

// linearTicks returns about five ticks at 1, 2 or 5 times a power of ten
// that cover [lo, hi].
func linearTicks(lo, hi float64) []tick {
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{2, 5, 10} {
		if step >= raw {
			break
		}
		step = m * mag
	}
	decimals := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	first := math.Floor(lo/step+1e-9) * step
	var out []tick
	for i := 0; i < 100; i++ {
		v := first + float64(i)*step
		if v > hi+step*(1-1e-9) {
			break
		}
		v = math.Round(v/step) * step
		if v == 0 {
			v = 0 // no "-0"
		}
		out = append(out, tick{v: v, label: strconv.FormatFloat(v, 'f', decimals, 64)})
		if v >= hi {
			break
		}
	}
	return out
}

// ticksWithin returns the ticks in [lo, hi].
func ticksWithin(ts []tick, lo, hi float64) []tick {
	var out []tick
	for _, t := range ts {
		if t.v >= lo-1e-9*(hi-lo) && t.v <= hi+1e-9*(hi-lo) {
			out = append(out, t)
		}
	}
	return out
}

// logTicks returns powers of ten covering [lo, hi], with 2 and 5 between
// them when the range spans fewer than three decades. The first tick is the
// largest candidate <= lo and the last the smallest >= hi.
func logTicks(lo, hi float64) []tick {
	e0 := int(math.Floor(math.Log10(lo) + 1e-9))
	e1 := int(math.Ceil(math.Log10(hi) - 1e-9))
	if e1 == e0 {
		e1++
	}
	mults := []float64{1}
	if e1-e0 < 3 {
		mults = []float64{1, 2, 5}
	}
	var cand []float64
	for e := e0; e <= e1; e++ {
		for _, m := range mults {
			cand = append(cand, m*math.Pow(10, float64(e)))
		}
	}
	first, last := 0, len(cand)-1
	for first+1 < len(cand) && cand[first+1] <= lo {
		first++
	}
	for last-1 >= 0 && cand[last-1] >= hi {
		last--
	}
	var out []tick
	for _, v := range cand[first : last+1] {
		out = append(out, tick{v: v, label: strconv.FormatFloat(v, 'g', 4, 64)})
	}
	return out
}

// Color returns the palette's i-th colour, for callers that fix one colour
// per name across figures.
func Color(i int) string { return palette[i%len(palette)] }

func style(i int) (color, dash string) {
	color = palette[i%len(palette)]
	if i >= len(palette) {
		dash = ` stroke-dasharray="6 3"`
	}
	return color, dash
}

// esc escapes text for SVG.
func esc(s string) string {
	var b strings.Builder
	if err := xml.EscapeText(&b, []byte(s)); err != nil {
		return "" // only on a failing writer; strings.Builder never fails
	}
	return b.String()
}

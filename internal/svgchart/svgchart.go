package svgchart

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Point is one data point.
type Point struct{ X, Y float64 }

// Series is one line of a Chart.
type Series struct {
	Name  string
	Color string // "": Color(i) for the i-th series
	// Points is a run of points joined by a line; Segments are more runs,
	// drawn after it (a gap in the data starts a new segment).
	Points   []Point
	Segments [][]Point
	Right    bool // plotted against the right-hand axis (drawn dashed)
	Step     bool // a level holds until the next point
	Marks    bool // a dot on every point
	Dashed   bool
}

// Scale is an axis' scale.
type Scale int

// The scales. On a logarithmic axis, points at or below zero are left
// out.
const (
	Linear Scale = iota
	Log10
	Log2
)

// Axis is one axis of a chart. The zero Axis is linear, from 0 (or the
// data's minimum if negative) to a round number above the data, with
// round ticks.
type Axis struct {
	Label string
	Scale Scale
	// Ticks are the values labelled on the axis; nil: round values (on a
	// log axis, the powers of the base covering the data). Given ticks
	// also widen the axis' range to include them.
	Ticks []float64
	// Min and Max fix the range when Max > Min (on a log axis, Min > 0).
	Min, Max float64
	// Format labels the ticks (and bar values); nil: Number.
	Format func(float64) string
}

// Ref is a horizontal reference line (a target) on a chart's left axis.
type Ref struct {
	Y     float64
	Label string
}

// Legend is where a chart lists its series.
type Legend int

// The legend positions.
const (
	LegendBelow Legend = iota // rows of six under the plot
	LegendRight               // a column right of the plot
)

// Chart is a line chart.
type Chart struct {
	Title         string
	Width, Height int // default 720 × 400 (a legend below adds rows)
	X, Y          Axis
	Y2            Axis // the right-hand axis, drawn when it has a Label
	Series        []Series
	Refs          []Ref
	Legend        Legend
}

// palette colors series in order.
var palette = []string{"#2f6fdb", "#d9480f", "#2b8a3e", "#ae3ec9", "#e8590c", "#0b7285", "#c2255c", "#5f3dc4", "#868e96", "#74b816"}

// Color returns the i-th color of the palette (it repeats), for callers
// that keep a series' color across charts.
func Color(i int) string { return palette[i%len(palette)] }

// Number formats a value compactly: 0.05, 2.5, 16, 12k, 1.5M, 2G.
func Number(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trim(v/1e9) + "G"
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e4:
		return trim(v/1e3) + "k"
	case a > 0 && a < 1:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return trim(v)
}

func trim(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// Panel is a chart that can stand alone or in a Figure: *Chart or
// *BarChart.
type Panel interface {
	WriteTo(w io.Writer) (int64, error)
	size() (w, h float64)
	body(b *bytes.Buffer)
}

// svgAttrs are the root element's attributes.
func svgAttrs(w, h float64) string {
	return fmt.Sprintf(`xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="Helvetica, Arial, sans-serif" font-size="12"`, w, h, w, h)
}

// standalone writes p as an SVG document.
func standalone(w io.Writer, p Panel) (int64, error) {
	var b bytes.Buffer
	pw, ph := p.size()
	fmt.Fprintf(&b, "<svg %s>\n", svgAttrs(pw, ph))
	p.body(&b)
	b.WriteString("</svg>\n")
	return b.WriteTo(w)
}

// writeFile writes p to path, after a comment naming the command that
// made the file (every figure in docs/figures says how to redraw it).
func writeFile(path string, p io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(f, "<!-- Made by: %s -->\n", madeBy(os.Args)); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if _, err := p.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// Figure puts panels side by side, left to right, under a title.
type Figure struct {
	Title  string
	Panels []Panel
}

const figureTitle = 32.0

// WriteTo writes the figure as an SVG document.
func (f *Figure) WriteTo(w io.Writer) (int64, error) {
	var W, H float64
	for _, p := range f.Panels {
		pw, ph := p.size()
		W, H = W+pw, max(H, ph)
	}
	H += figureTitle
	var b bytes.Buffer
	fmt.Fprintf(&b, "<svg %s>\n", svgAttrs(W, H))
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="#fff"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%g" y="22" text-anchor="middle" font-size="15" font-weight="bold">%s</text>`+"\n", W/2, esc(f.Title))
	x := 0.0
	for _, p := range f.Panels {
		pw, ph := p.size()
		fmt.Fprintf(&b, `<svg x="%g" y="%g" width="%g" height="%g">`+"\n", x, figureTitle, pw, ph)
		p.body(&b)
		b.WriteString("</svg>\n")
		x += pw
	}
	b.WriteString("</svg>\n")
	return b.WriteTo(w)
}

// WriteFile writes the figure to path.
func (f *Figure) WriteFile(path string) error { return writeFile(path, f) }

// frame is a plot area within a panel.
type frame struct{ left, top, w, h float64 }

// scale maps data values on an axis to [0, 1].
type scale struct {
	Scale
	lo, hi float64 // in transformed units (log_base for log scales)
	ticks  []float64
	format func(float64) string
}

func (s Scale) log() bool { return s == Log10 || s == Log2 }

// t transforms a value to the scale's units.
func (s Scale) t(v float64) float64 {
	switch s {
	case Log10:
		return math.Log10(v)
	case Log2:
		return math.Log2(v)
	}
	return v
}

func (s Scale) inv(u float64) float64 {
	switch s {
	case Log10:
		return math.Pow(10, u)
	case Log2:
		return math.Exp2(u)
	}
	return u
}

// shows reports whether v can be placed on the scale.
func (s Scale) shows(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && (!s.log() || v > 0)
}

func (s scale) frac(v float64) float64 { return (s.t(v) - s.lo) / (s.hi - s.lo) }

// newScale builds the scale of an axis over data values vals, with about
// n round ticks on a linear axis.
func newScale(a Axis, vals []float64, n int) scale {
	s := scale{Scale: a.Scale, format: a.Format}
	if s.format == nil {
		s.format = Number
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range append(vals[:len(vals):len(vals)], a.Ticks...) {
		if a.Scale.shows(v) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if a.Max > a.Min && (!a.Scale.log() || a.Min > 0) {
		lo, hi = a.Min, a.Max
	}
	if a.Scale.log() {
		if math.IsInf(lo, 0) {
			lo, hi = 1, 10
		}
		s.lo, s.hi = math.Floor(s.t(lo)+1e-9), math.Ceil(s.t(hi)-1e-9)
		if len(a.Ticks) > 0 || a.Max > a.Min { // the range itself, with a margin for end points' marks
			s.lo, s.hi = s.t(lo), s.t(hi)
			if a.Max <= a.Min {
				pad := 0.04 * (s.hi - s.lo)
				s.lo, s.hi = s.lo-pad, s.hi+pad
			}
		}
		if s.hi <= s.lo {
			s.hi = s.lo + 1
		}
		s.ticks = a.Ticks
		if len(s.ticks) == 0 {
			for e := math.Ceil(s.lo - 1e-9); e <= s.hi+1e-9; e++ {
				s.ticks = append(s.ticks, s.inv(e))
			}
		}
		return s
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	if a.Max > a.Min {
		s.lo, s.hi = lo, hi
	} else {
		var step float64
		s.lo, s.hi, step = niceRange(math.Min(lo, 0), hi, n)
		for v := s.lo; v <= s.hi+step*1e-6; v += step {
			s.ticks = append(s.ticks, v)
		}
	}
	if len(a.Ticks) > 0 {
		s.ticks = a.Ticks
	}
	return s
}

// niceRange returns a range from at most lo to at least hi in about n round
// steps (1, 2, 2.5 or 5 × 10^k).
func niceRange(lo, hi float64, n int) (float64, float64, float64) {
	if !(hi > lo) {
		hi = lo + 1
	}
	raw := (hi - lo) / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * p
	for _, m := range []float64{1, 2, 2.5, 5} {
		if raw/p <= m {
			step = m * p
			break
		}
	}
	return math.Floor(lo/step+1e-9) * step, math.Ceil(hi/step-1e-9) * step, step
}

// yAxis draws a left (or right) axis' grid, tick labels and title.
func yAxis(b *bytes.Buffer, f frame, s scale, label string, right bool) {
	for _, v := range s.ticks {
		fr := s.frac(v)
		if fr < -1e-9 || fr > 1+1e-9 {
			continue
		}
		y := f.top + f.h - fr*f.h
		if right {
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="#555">%s</text>`+"\n", f.left+f.w+6, y+4, esc(s.format(v)))
			continue
		}
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e6e8ec"/>`+"\n", f.left, f.left+f.w, y, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", f.left-6, y+4, esc(s.format(v)))
	}
	if right {
		fmt.Fprintf(b, `<text transform="translate(%.1f %.1f) rotate(90)" text-anchor="middle">%s</text>`+"\n", f.left+f.w+52, f.top+f.h/2, esc(label))
		return
	}
	fmt.Fprintf(b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", f.top+f.h/2, esc(label))
}

// legendEntry draws one legend entry at x, y (the text's baseline).
func legendEntry(b *bytes.Buffer, x, y float64, name, color string, dashed, box bool) {
	if box {
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/>`, x+3, y-10, color)
	} else {
		dash := ""
		if dashed {
			dash = ` stroke-dasharray="6 3"`
		}
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="3"%s/>`, x, x+18, y-4, y-4, color, dash)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+22, y, esc(name))
}

// madeBy names the command of args (os.Args) as it is run from the
// repository's root: `go run ./cmd/NAME ARGS`, "--" escaped for the
// comment it goes into.
func madeBy(args []string) string {
	cmd := "go run ./cmd/" + strings.TrimSuffix(filepath.Base(args[0]), ".test")
	if len(args) > 1 {
		cmd += " " + strings.Join(args[1:], " ")
	}
	return strings.ReplaceAll(cmd, "--", "- -")
}

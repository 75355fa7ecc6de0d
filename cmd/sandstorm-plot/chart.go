package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// chartFiles writes charts as SVG files in one folder and keeps the
// paths it wrote, in order.
type chartFiles struct {
	dir     string
	written []string
}

// write writes c to the file name in the folder.
func (cf *chartFiles) write(name string, c *chart) error {
	p := filepath.Join(cf.dir, name)
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if err := c.write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	cf.written = append(cf.written, p)
	return nil
}

// palette colors the series of a chart, in order.
var palette = []string{"#2f6fdb", "#d9480f", "#2b8a3e", "#ae3ec9", "#e8590c", "#0b7285", "#c2255c", "#5f3dc4", "#868e96", "#74b816"}

// series is one line of a chart: x in seconds, y in the series' unit.
type series struct {
	Name  string
	Color string
	Right bool // plotted against the right-hand axis
	Step  bool // drawn as steps: a level that holds until the next sample
	Marks bool // a dot on every point (a sweep's few measured points)
	// Segments are runs of points joined by a line; a gap in the data
	// (the stage was absent, the log restarted) starts a new segment.
	Segments [][]point
}

type point struct{ X, Y float64 }

// chart is a line chart written as standalone SVG.
type chart struct {
	Title         string
	XLabel        string
	YLabel        string
	Y2Label       string // right axis; "" for none
	Width, Height int
	Series        []series
	// LogX draws the x axis in log scale (x must be positive; other
	// points are left out), with ticks at XTicks or else at the powers of
	// ten in the data's range.
	LogX   bool
	XTicks []float64
}

// axis is a linear scale with round ticks.
type axis struct {
	Min, Max, Step float64
}

// niceAxis returns an axis from 0 (or lo, if negative) to at least hi with
// about n round ticks (steps of 1, 2, 2.5 or 5 × 10^k).
func niceAxis(lo, hi float64, n int) axis {
	lo = math.Min(lo, 0)
	if !(hi > lo) || math.IsInf(hi, 0) || math.IsNaN(hi) {
		hi = lo + 1
	}
	raw := (hi - lo) / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	var step float64
	switch m := raw / p; {
	case m <= 1:
		step = p
	case m <= 2:
		step = 2 * p
	case m <= 2.5:
		step = 2.5 * p
	case m <= 5:
		step = 5 * p
	default:
		step = 10 * p
	}
	return axis{Min: math.Floor(lo/step+1e-9) * step, Max: math.Ceil(hi/step-1e-9) * step, Step: step}
}

func (a axis) ticks() []float64 {
	var out []float64
	for i := 0; ; i++ {
		v := a.Min + float64(i)*a.Step
		if v > a.Max+a.Step*1e-6 {
			return out
		}
		out = append(out, v)
	}
}

// label formats a tick value compactly.
func label(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trim(v/1e9) + "G"
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e4:
		return trim(v/1e3) + "k"
	}
	return trim(v)
}

func trim(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// bounds returns the data range of the series on one side.
func (c *chart) bounds(right bool) (xmin, xmax, ymin, ymax float64, ok bool) {
	xmin, ymin = math.Inf(1), math.Inf(1)
	xmax, ymax = math.Inf(-1), math.Inf(-1)
	for _, s := range c.Series {
		for _, seg := range s.Segments {
			for _, p := range seg {
				xmin, xmax = math.Min(xmin, p.X), math.Max(xmax, p.X)
				if s.Right == right {
					ymin, ymax = math.Min(ymin, p.Y), math.Max(ymax, p.Y)
					ok = true
				}
			}
		}
	}
	return
}

// write renders the chart.
func (c *chart) write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	W, H := float64(c.Width), float64(c.Height)
	const top, bottom, left = 40.0, 58.0, 64.0
	right := 24.0
	if c.Y2Label != "" {
		right = 64
	}
	legendRows := (len(c.Series) + 5) / 6
	H += float64(legendRows) * 18
	plotH := float64(c.Height) - top - bottom
	plotW := W - left - right

	x0, x1, ymin, ymax, _ := c.bounds(false)
	if math.IsInf(x0, 0) {
		x0, x1 = 0, 1
	}
	if math.IsInf(ymin, 0) {
		ymin, ymax = 0, 1
	}
	xa := niceAxis(x0, x1, 8)
	xticks := xa.ticks()
	xlabel := label
	if c.LogX {
		xa, xticks = c.logAxis()
		xlabel = logLabel
	}
	ya := niceAxis(ymin, ymax, 5)
	var ya2 axis
	if c.Y2Label != "" {
		_, _, lo, hi, ok := c.bounds(true)
		if !ok {
			lo, hi = 0, 1
		}
		ya2 = niceAxis(lo, hi, 5)
	}
	sx := func(x float64) float64 { return left + (x-xa.Min)/(xa.Max-xa.Min)*plotW }
	if c.LogX {
		sx = func(x float64) float64 { return left + (math.Log10(x)-xa.Min)/(xa.Max-xa.Min)*plotW }
	}
	sy := func(a axis, y float64) float64 { return top + plotH - (y-a.Min)/(a.Max-a.Min)*plotH }

	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(bw, `<rect width="%g" height="%g" fill="#fff"/>`+"\n", W, H)
	fmt.Fprintf(bw, `<text x="%g" y="22" text-anchor="middle" font-size="15" font-weight="bold">%s</text>`+"\n", W/2, esc(c.Title))
	// grid and left axis
	for _, v := range ya.ticks() {
		y := sy(ya, v)
		fmt.Fprintf(bw, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e6e8ec"/>`+"\n", left, left+plotW, y, y)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", left-6, y+4, esc(label(v)))
	}
	for _, v := range xticks {
		x := sx(v)
		fmt.Fprintf(bw, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#999"/>`+"\n", x, x, top+plotH, top+plotH+4)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", x, top+plotH+17, esc(xlabel(v)))
	}
	fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`+"\n", left, top, plotW, plotH)
	fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", left+plotW/2, top+plotH+36, esc(c.XLabel))
	fmt.Fprintf(bw, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", top+plotH/2, esc(c.YLabel))
	if c.Y2Label != "" {
		for _, v := range ya2.ticks() {
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" fill="#555">%s</text>`+"\n", left+plotW+6, sy(ya2, v)+4, esc(label(v)))
		}
		fmt.Fprintf(bw, `<text transform="translate(%.1f %.1f) rotate(90)" text-anchor="middle">%s</text>`+"\n", W-12, top+plotH/2, esc(c.Y2Label))
	}
	// lines
	for _, s := range c.Series {
		a := ya
		if s.Right {
			a = ya2
		}
		for _, seg := range s.Segments {
			if c.LogX {
				seg = positiveX(seg)
			}
			var pts strings.Builder
			for i, p := range seg {
				if s.Step && i > 0 {
					fmt.Fprintf(&pts, "%.1f,%.1f ", sx(p.X), sy(a, seg[i-1].Y))
				}
				fmt.Fprintf(&pts, "%.1f,%.1f ", sx(p.X), sy(a, p.Y))
			}
			dash := ""
			if s.Right {
				dash = ` stroke-dasharray="6 3"`
			}
			fmt.Fprintf(bw, `<polyline data-series="%s" fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>`+"\n",
				esc(s.Name), s.Color, dash, strings.TrimSpace(pts.String()))
			if s.Marks {
				for _, p := range seg {
					fmt.Fprintf(bw, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", sx(p.X), sy(a, p.Y), s.Color)
				}
			}
		}
	}
	// legend
	for i, s := range c.Series {
		x := left + float64(i%6)*(plotW/6)
		y := float64(c.Height) - 8 + float64(i/6)*18
		fmt.Fprintf(bw, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`, x, x+18, y-4, y-4, s.Color)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+22, y, esc(s.Name))
	}
	bw.WriteString("</svg>\n")
	return bw.Flush()
}

// positiveX returns the points of seg with x > 0 (those a log axis can
// show).
func positiveX(seg []point) []point {
	out := seg[:0:0]
	for _, p := range seg {
		if p.X > 0 {
			out = append(out, p)
		}
	}
	return out
}

// logAxis returns the x axis of a log-scale chart, in log10 units, and its
// ticks (in data units): c.XTicks, or the powers of ten covering the data.
func (c *chart) logAxis() (axis, []float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, seg := range s.Segments {
			for _, p := range seg {
				if p.X > 0 {
					lo, hi = math.Min(lo, p.X), math.Max(hi, p.X)
				}
			}
		}
	}
	for _, t := range c.XTicks {
		if t > 0 {
			lo, hi = math.Min(lo, t), math.Max(hi, t)
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 1, 10
	}
	a := axis{Min: math.Floor(math.Log10(lo) + 1e-9), Max: math.Ceil(math.Log10(hi) - 1e-9)}
	if len(c.XTicks) > 0 { // the data's range, and a margin for the end points' marks
		a.Min, a.Max = math.Log10(lo), math.Log10(hi)
		pad := 0.04 * (a.Max - a.Min)
		a.Min, a.Max = a.Min-pad, a.Max+pad
	}
	if a.Max <= a.Min {
		a.Max = a.Min + 1
	}
	ticks := c.XTicks
	if len(ticks) == 0 {
		for e := a.Min; e <= a.Max+1e-9; e++ {
			ticks = append(ticks, math.Pow(10, e))
		}
	}
	return a, ticks
}

// logLabel formats a tick of a log axis: 0.01, 0.1, 1, 10, 1k, 10k.
func logLabel(v float64) string {
	if v < 1 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return label(v)
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

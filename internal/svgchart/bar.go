package svgchart

import (
	"bytes"
	"fmt"
	"io"
	"math"
)

// BarChart is a grouped bar chart: one group per category along x, one
// bar per series in each group.
type BarChart struct {
	Title         string
	Width, Height int      // default 720 × 400
	Categories    []string // the groups, left to right
	Notes         []string // optional second line under each category
	X             Axis     // only its Label is used
	Y             Axis     // Linear (from 0) or Log10
	Series        []BarSeries
	Values        bool // label each bar with its value (Y.Format)
}

// BarSeries is one bar per category.
type BarSeries struct {
	Name   string
	Color  string    // "": Color(i)
	Values []float64 // per category; NaN or missing: no bar
	Titles []string  // optional tooltip per bar
}

// WriteTo writes the chart as an SVG document.
func (c *BarChart) WriteTo(w io.Writer) (int64, error) { return standalone(w, c) }

// WriteFile writes the chart to path.
func (c *BarChart) WriteFile(path string) error { return writeFile(path, c) }

func (c *BarChart) size() (float64, float64) {
	w, h := float64(defaultWidth), float64(defaultHeight)
	if c.Width > 0 {
		w = float64(c.Width)
	}
	if c.Height > 0 {
		h = float64(c.Height)
	}
	return w, h
}

func (c *BarChart) body(b *bytes.Buffer) {
	W, H := c.size()
	f := frame{left: 84, top: 48}
	f.w, f.h = W-f.left-24, H-f.top-72
	var vals []float64
	for _, s := range c.Series {
		vals = append(vals, s.Values...)
	}
	sy := newScale(c.Y, vals, 5)
	base := f.top + f.h // bars grow from the axis' minimum
	py := func(v float64) float64 { return f.top + f.h - math.Max(0, math.Min(1, sy.frac(v)))*f.h }

	fmt.Fprintf(b, `<rect width="%g" height="%g" fill="#fff"/>`+"\n", W, H)
	fmt.Fprintf(b, `<text x="%.1f" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", f.left, esc(c.Title))
	yAxis(b, f, sy, c.Y.Label, false)
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`+"\n", f.left, f.top, f.w, f.h)
	slot := f.w / float64(max(1, len(c.Categories)))
	bw := slot * 0.7 / float64(max(1, len(c.Series)))
	for i, cat := range c.Categories {
		cx := f.left + slot*(float64(i)+0.5)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", cx, base+16, esc(cat))
		if i < len(c.Notes) && c.Notes[i] != "" {
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#777">%s</text>`+"\n", cx, base+30, esc(c.Notes[i]))
		}
		for k := range c.Series {
			s := &c.Series[k]
			if i >= len(s.Values) || !sy.shows(s.Values[i]) {
				continue
			}
			v := s.Values[i]
			x, y := cx-bw*float64(len(c.Series))/2+float64(k)*bw, py(v)
			title := ""
			if i < len(s.Titles) && s.Titles[i] != "" {
				title = "<title>" + esc(s.Titles[i]) + "</title>"
			}
			fmt.Fprintf(b, `<rect data-series="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s">%s</rect>`+"\n",
				esc(s.Name), x, y, bw-2, base-y, c.color(k), title)
			if c.Values {
				fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n", x+bw/2-1, y-3, esc(sy.format(v)))
			}
		}
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", f.left+f.w/2, base+48, esc(c.X.Label))
	for k := range c.Series {
		legendEntry(b, f.left+f.w-float64(len(c.Series)-k)*80, f.top-8, c.Series[k].Name, c.color(k), false, true)
	}
}

func (c *BarChart) color(k int) string {
	if c.Series[k].Color != "" {
		return c.Series[k].Color
	}
	return Color(k)
}

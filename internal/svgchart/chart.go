package svgchart

import (
	"bytes"
	"fmt"
	"io"
	"strings"
)

const (
	defaultWidth, defaultHeight = 720, 400
	legendPerRow                = 6
	legendRow                   = 18.0
	legendColumn                = 150.0
)

func (c *Chart) dims() (w, h float64) {
	w, h = defaultWidth, defaultHeight
	if c.Width > 0 {
		w = float64(c.Width)
	}
	if c.Height > 0 {
		h = float64(c.Height)
	}
	return w, h
}

func (c *Chart) size() (float64, float64) {
	w, h := c.dims()
	if c.Legend == LegendBelow {
		h += float64((len(c.Series)+legendPerRow-1)/legendPerRow) * legendRow
	}
	return w, h
}

func (c *Chart) frame() frame {
	w, h := c.dims()
	f := frame{left: 64, top: 40}
	right := 24.0
	if c.Y2.Label != "" {
		right = 64
	}
	if c.Legend == LegendRight {
		right += legendColumn
	}
	f.w, f.h = w-f.left-right, h-f.top-58
	return f
}

// runs returns a series' runs of points.
func (s *Series) runs() [][]Point {
	if len(s.Points) == 0 {
		return s.Segments
	}
	return append([][]Point{s.Points}, s.Segments...)
}

// values returns the x values of every series, and the y values of the
// series on one side.
func (c *Chart) values(right bool) (xs, ys []float64) {
	for i := range c.Series {
		s := &c.Series[i]
		for _, run := range s.runs() {
			for _, p := range run {
				xs = append(xs, p.X)
				if s.Right == right {
					ys = append(ys, p.Y)
				}
			}
		}
	}
	return xs, ys
}

// WriteTo writes the chart as an SVG document.
func (c *Chart) WriteTo(w io.Writer) (int64, error) { return standalone(w, c) }

// WriteFile writes the chart to path.
func (c *Chart) WriteFile(path string) error { return writeFile(path, c) }

func (c *Chart) body(b *bytes.Buffer) {
	W, H := c.size()
	f := c.frame()
	xs, ys := c.values(false)
	for _, r := range c.Refs {
		ys = append(ys, r.Y)
	}
	sx, sy := newScale(c.X, xs, 8), newScale(c.Y, ys, 5)
	var sy2 scale
	if c.Y2.Label != "" {
		_, ys2 := c.values(true)
		sy2 = newScale(c.Y2, ys2, 5)
	}
	px := func(x float64) float64 { return f.left + sx.frac(x)*f.w }
	py := func(s scale, y float64) float64 { return f.top + f.h - s.frac(y)*f.h }

	fmt.Fprintf(b, `<rect width="%g" height="%g" fill="#fff"/>`+"\n", W, H)
	fmt.Fprintf(b, `<text x="%g" y="22" text-anchor="middle" font-size="15" font-weight="bold">%s</text>`+"\n", W/2, esc(c.Title))
	yAxis(b, f, sy, c.Y.Label, false)
	for _, v := range sx.ticks {
		if fr := sx.frac(v); fr < -1e-9 || fr > 1+1e-9 {
			continue
		}
		x := px(v)
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#999"/>`+"\n", x, x, f.top+f.h, f.top+f.h+4)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", x, f.top+f.h+17, esc(sx.format(v)))
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`+"\n", f.left, f.top, f.w, f.h)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", f.left+f.w/2, f.top+f.h+36, esc(c.X.Label))
	if c.Y2.Label != "" {
		yAxis(b, f, sy2, c.Y2.Label, true)
	}
	for _, r := range c.Refs {
		y := py(sy, r.Y)
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="2 3"/>`+"\n", f.left, f.left+f.w, y, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="#666">%s</text>`+"\n", f.left+4, y-4, esc(r.Label))
	}
	for i := range c.Series {
		s := &c.Series[i]
		a, color := sy, c.color(i)
		if s.Right {
			a = sy2
		}
		for _, run := range s.runs() {
			var pts strings.Builder
			var prev *Point
			for _, p := range run {
				if !sx.shows(p.X) || !a.shows(p.Y) {
					continue
				}
				if s.Step && prev != nil {
					fmt.Fprintf(&pts, "%.1f,%.1f ", px(p.X), py(a, prev.Y))
				}
				fmt.Fprintf(&pts, "%.1f,%.1f ", px(p.X), py(a, p.Y))
				prev = &p
			}
			if prev == nil {
				continue
			}
			fmt.Fprintf(b, `<polyline data-series="%s" fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>`+"\n",
				esc(s.Name), color, s.dash(), strings.TrimSpace(pts.String()))
			if s.Marks {
				for _, p := range run {
					if sx.shows(p.X) && a.shows(p.Y) {
						fmt.Fprintf(b, `<circle data-series="%s" cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", esc(s.Name), px(p.X), py(a, p.Y), color)
					}
				}
			}
		}
	}
	for i := range c.Series {
		s := &c.Series[i]
		var x, y float64
		if c.Legend == LegendRight {
			x, y = f.left+f.w+map[bool]float64{false: 10, true: 50}[c.Y2.Label != ""], f.top+10+float64(i)*legendRow
		} else {
			x, y = f.left+float64(i%legendPerRow)*(f.w/legendPerRow), f.top+f.h+50+float64(i/legendPerRow)*legendRow
		}
		legendEntry(b, x, y, s.Name, c.color(i), s.dash() != "", false)
	}
}

func (c *Chart) color(i int) string {
	if c.Series[i].Color != "" {
		return c.Series[i].Color
	}
	return Color(i)
}

func (s *Series) dash() string {
	if s.Dashed || s.Right {
		return ` stroke-dasharray="6 3"`
	}
	return ""
}

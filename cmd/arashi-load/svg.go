package main

import (
	"fmt"
	"math"
	"os"
	"strings"
)

// series is one line of a chart.
type series struct {
	name   string
	x, y   []float64
	dashed bool
}

// chart is a small SVG line chart: a linear or base-2 logarithmic x axis,
// a linear y axis from 0, a legend, and optionally a horizontal reference
// line (a target).
type chart struct {
	title, xlabel, ylabel string
	logx                  bool
	ref                   float64 // drawn when > 0
	refLabel              string
	lines                 []series
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

func (c chart) write(path string) error {
	const w, h, left, right, top, bottom = 720, 400, 70, 170, 40, 50
	pw, ph := float64(w-left-right), float64(h-top-bottom)
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), c.ref
	for _, s := range c.lines {
		for i := range s.x {
			xmin, xmax = math.Min(xmin, s.x[i]), math.Max(xmax, s.x[i])
			ymax = math.Max(ymax, s.y[i])
		}
	}
	if xmax <= xmin {
		xmax = xmin + 1
	}
	if ymax <= 0 {
		ymax = 1
	}
	ymax = niceCeil(ymax * 1.05)
	fx := func(x float64) float64 {
		if c.logx {
			return left + (math.Log2(x)-math.Log2(xmin))/(math.Log2(xmax)-math.Log2(xmin))*pw
		}
		return left + (x-xmin)/(xmax-xmin)*pw
	}
	fy := func(y float64) float64 { return top + ph - y/ymax*ph }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", left, esc(c.title))
	// Axes and grid.
	for i := 0; i <= 5; i++ {
		y := ymax * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, left+pw, fy(y), fy(y))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, fy(y)+4, num(y))
	}
	var ticks []float64
	if c.logx {
		for x := xmin; x <= xmax*1.0001; x *= 2 {
			ticks = append(ticks, x)
		}
	} else {
		for i := 0; i <= 6; i++ {
			ticks = append(ticks, xmin+(xmax-xmin)*float64(i)/6)
		}
	}
	for _, x := range ticks {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", fx(x), top+ph+16, num(x))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#444"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", left+pw/2, h-10, esc(c.xlabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", top+ph/2, esc(c.ylabel))
	if c.ref > 0 {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="2 3"/>`+"\n", left, left+pw, fy(c.ref), fy(c.ref))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="#666">%s</text>`+"\n", left+4, fy(c.ref)-4, esc(c.refLabel))
	}
	for i, s := range c.lines {
		col := palette[i%len(palette)]
		var pts []string
		for j := range s.x {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", fx(s.x[j]), fy(s.y[j])))
		}
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", col, dash, strings.Join(pts, " "))
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="2.5" fill="%s"/>`+"\n", xy[0], xy[1], col)
		}
		ly := top + 10 + i*18
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", left+pw+10, left+pw+30, ly, ly, col, dash)
		fmt.Fprintf(&b, `<text x="%.0f" y="%d">%s</text>`+"\n", left+pw+34, ly+4, esc(s.name))
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func num(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	if v >= 10 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
